// srun --multi-prog: a configuration file that gives each task of a step its own program
// and arguments (MPMD: a parameter server beside workers, a coordinator beside ranks), read
// as Slurm 22.05's srun reads it (srun(1), "MULTIPLE PROGRAM CONFIGURATION"; each rule below
// was checked against that srun with probe files on 2026-12-01: MultiProgTest holds what it
// did, bench/slurm_scripts/multi_prog.sbatch compares a script). Hand-written: no library
// reads this format.
//
//   # a comment (first non-blank character)
//   0        python ps.py --rank %t
//   1-3,5    python worker.py --index %o
//   *        python idle.py            (every task not named above; the last line only)
//
// A line is task ranks (comma-separated N or N-M, or `*`), the program and its arguments,
// separated by blanks. `%t` is the task's id, `%o` its offset among the line's ranks (the
// ranks of `0,2-3` have offsets 0, 1, 2; under `*`, the task's id); any other `%X` is
// dropped, as Slurm drops it.
// Single quotes keep what they enclose as it is (no blanks split it, no `%` expands);
// a backslash keeps the next character; double quotes are ordinary characters (Slurm's);
// a line ending in a backslash goes on with the next one (the backslash then keeps that
// line's first character). Every task of the step must have exactly one line.
// Thread-safety: value type; ArgvFor is const.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gantry::spec {

class MultiProg {
 public:
  // The file's text for a step of `ntasks` tasks; nullopt with `error` set to why, naming
  // the file and line as Slurm's srun does ("Line 2 of configuration file a.conf invalid:
  // ...").
  static std::optional<MultiProg> Parse(std::string_view text, int ntasks, const std::string& file,
                                        std::string& error);

  // Task `task`'s program and arguments, then `extra` (srun's words after the file) as given.
  std::vector<std::string> ArgvFor(int task, const std::vector<std::string>& extra) const;

 private:
  // A word is pieces: text, or a task's id or offset to put in.
  struct Piece {
    enum class Kind : uint8_t { kText, kTask, kOffset } kind = Kind::kText;
    std::string text;
  };
  using Word = std::vector<Piece>;
  struct Line {
    std::vector<Word> words;  // the program, then its arguments
  };
  std::vector<Line> lines_;
  std::vector<int> line_of_;  // by task: its line in lines_
  std::vector<int> offset_;   // by task: its offset among its line's ranks
};

}  // namespace gantry::spec
