// srun --multi-prog files: each case as Slurm 22.05's srun read it (bench/slurm_scripts.py
// with a probe script of these files, 2026-12-01), and the refusals naming file and line.
#include "spec/multi_prog.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace gantry::spec {
namespace {

using Argv = std::vector<std::string>;

// Every task's argv, or the error.
std::vector<Argv> All(const std::string& text, int ntasks, std::string* error = nullptr,
                      const Argv& extra = {}) {
  std::string why;
  std::optional<MultiProg> m = MultiProg::Parse(text, ntasks, "x.conf", why);
  if (error) *error = why;
  std::vector<Argv> out;
  if (!m) return out;
  for (int t = 0; t < ntasks; ++t) out.push_back(m->ArgvFor(t, extra));
  return out;
}

TEST(MultiProgTest, RanksOffsetsAndTaskIdsAsSrunsManualShowsThem) {
  const std::vector<Argv> got =
      All("# srun multiple program configuration file\n"
          "4-6       hostname\n"
          "1,7       echo  task:%t\n"
          "0,2-3     echo  offset:%o\n",
          8);
  const std::vector<Argv> want = {{"echo", "offset:0"}, {"echo", "task:1"}, {"echo", "offset:1"},
                                  {"echo", "offset:2"}, {"hostname"},       {"hostname"},
                                  {"hostname"},         {"echo", "task:7"}};
  EXPECT_EQ(got, want);
}

TEST(MultiProgTest, TheRestLineAndWordsAfterTheFile) {
  EXPECT_EQ(All("0 echo zero\n* echo rest %t %o\n", 4),
            (std::vector<Argv>{{"echo", "zero"},
                               {"echo", "rest", "1", "1"},
                               {"echo", "rest", "2", "2"},
                               {"echo", "rest", "3", "3"}}));
  // srun --multi-prog FILE X 'Y Z': appended to every task's, not expanded.
  EXPECT_EQ(All("0-1 echo a %t\n", 2, nullptr, {"X", "Y %t"}),
            (std::vector<Argv>{{"echo", "a", "0", "X", "Y %t"}, {"echo", "a", "1", "X", "Y %t"}}));
  // The program's name is a word like the others.
  EXPECT_EQ(All("0-1 ./run-%t.sh\n", 2), (std::vector<Argv>{{"./run-0.sh"}, {"./run-1.sh"}}));
}

TEST(MultiProgTest, QuotingAsSlurmReadsIt) {
  // Single quotes keep blanks and %; double quotes are ordinary characters.
  EXPECT_EQ(All("0 echo 'a  b' %t\n", 1), (std::vector<Argv>{{"echo", "a  b", "0"}}));
  EXPECT_EQ(All("0 echo '%t'\n", 1), (std::vector<Argv>{{"echo", "%t"}}));
  EXPECT_EQ(All("0 echo \"a  b\"\n", 1), (std::vector<Argv>{{"echo", "\"a", "b\""}}));
  EXPECT_EQ(All("0 printf 'a b'c d''\n", 1), (std::vector<Argv>{{"printf", "a bc", "d"}}));
  // A backslash keeps the next character; a line ending in one goes on, keeping the next
  // line's first character ("a \<newline> b" gave echo's "a  b" under Slurm).
  EXPECT_EQ(All("0 printf a\\ b\n", 1), (std::vector<Argv>{{"printf", "a b"}}));
  EXPECT_EQ(All("0-1 echo a \\\n b\n2 echo c\n", 3),
            (std::vector<Argv>{{"echo", "a", " b"}, {"echo", "a", " b"}, {"echo", "c"}}));
  EXPECT_EQ(All("0 echo a\\\nb\n", 1), (std::vector<Argv>{{"echo", "ab"}}));
  // %% and unknown fields are dropped: "100%% %x %t%o" printed "100  00".
  EXPECT_EQ(All("0 echo 100%% %x %t%o\n", 1), (std::vector<Argv>{{"echo", "100", "", "00"}}));
}

TEST(MultiProgTest, CommentsBlankLinesAndTabs) {
  EXPECT_EQ(All("\n  # indented\n0-1\techo\ttab # not a comment\n\n", 2),
            (std::vector<Argv>{{"echo", "tab", "#", "not", "a", "comment"},
                               {"echo", "tab", "#", "not", "a", "comment"}}));
}

TEST(MultiProgTest, RefusalsNameTheFileAndLine) {
  std::string why;
  EXPECT_TRUE(All("* echo rest\n0 echo zero\n", 4, &why).empty());
  EXPECT_EQ(why,
            "Line 2 of configuration file x.conf invalid: Task range specification with asterisk "
            "must be last");
  EXPECT_TRUE(All("0-2 echo a\n", 4, &why).empty());
  EXPECT_EQ(why, "Configuration file x.conf invalid, no record for task id 3");
  EXPECT_TRUE(All("# c\n0-7 echo a\n", 4, &why).empty());
  EXPECT_EQ(why, "Line 2 of configuration file x.conf invalid: Invalid task id, 4 >= ntasks");
  EXPECT_TRUE(All("0-3 echo a\n1 echo b\n", 4, &why).empty());
  EXPECT_EQ(why, "Line 2 of configuration file x.conf invalid: Duplicate record for task 1");
  EXPECT_TRUE(All("3-0 echo r\n", 4, &why).empty());
  EXPECT_EQ(why, "Line 1 of configuration file x.conf invalid: Invalid task range, 3-0");
  EXPECT_TRUE(All("0-3\n", 4, &why).empty());
  EXPECT_EQ(why,
            "Line 1 of configuration file x.conf invalid: no program after the task ranks 0-3");
  // Slurm ignores "0," with a warning and runs "1" as the program: refused here.
  for (const char* bad : {"a-b echo x\n", "0, 1 echo c\n", "0-1,* echo c\n", "-1 echo\n",
                          "%t echo\n", "9999999999 echo\n"}) {
    EXPECT_TRUE(All(bad, 4, &why).empty()) << bad;
    EXPECT_NE(why.find("Line 1 of configuration file x.conf invalid: Invalid task range"),
              std::string::npos)
        << bad << ": " << why;
  }
  EXPECT_TRUE(All("0-3 echo 'a\n", 4, &why).empty());
  EXPECT_EQ(why, "Line 1 of configuration file x.conf invalid: a single quote is not closed");
  // The line a continued line starts on.
  EXPECT_TRUE(All("0 echo \\\na\n0 echo\n", 4, &why).empty());
  EXPECT_EQ(why, "Line 3 of configuration file x.conf invalid: Duplicate record for task 0");
}

}  // namespace
}  // namespace gantry::spec
