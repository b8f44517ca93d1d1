#include "spec/multi_prog.h"

#include <charconv>

namespace gantry::spec {
namespace {

bool Blank(char c) { return c == ' ' || c == '\t' || c == '\r'; }

// A whole number of at most 9 digits, or nullopt.
std::optional<int> Number(std::string_view s) {
  int v = 0;
  if (s.empty() || s.size() > 9) return std::nullopt;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

}  // namespace

std::optional<MultiProg> MultiProg::Parse(std::string_view text, int ntasks,
                                          const std::string& file, std::string& error) {
  MultiProg m;
  m.line_of_.assign(static_cast<size_t>(std::max(0, ntasks)), -1);
  m.offset_.assign(m.line_of_.size(), 0);
  bool had_rest = false;  // a `*` line was read: it must be the last
  int number = 0;         // the physical line being read
  auto fail = [&](int line, const std::string& why) {
    error = "Line " + std::to_string(line) + " of configuration file " + file + " invalid: " + why;
    return std::nullopt;
  };
  size_t at = 0;
  while (at < text.size()) {
    // A logical line: physical lines joined where one ends in a backslash (only the newline
    // goes, so the backslash keeps the next line's first character, as Slurm's).
    const int first = ++number;
    std::string line;
    while (at < text.size()) {
      size_t nl = text.find('\n', at);
      if (nl == std::string_view::npos) nl = text.size();
      line.append(text.substr(at, nl - at));
      at = nl + 1;
      if (line.empty() || line.back() != '\\' || at >= text.size()) break;
      ++number;
    }
    const size_t lead = line.find_first_not_of(" \t\r");
    if (lead == std::string::npos || line[lead] == '#') continue;

    // Words: blanks split them; quotes, backslashes and % fields as the header says.
    std::vector<Word> words;
    bool in_word = false;
    for (size_t i = 0; i < line.size(); ++i) {
      const char c = line[i];
      if (Blank(c)) {
        in_word = false;
        continue;
      }
      if (!in_word) words.emplace_back();
      in_word = true;
      Word& w = words.back();
      auto text_piece = [&]() -> std::string& {
        if (w.empty() || w.back().kind != Piece::Kind::kText) w.push_back({});
        return w.back().text;
      };
      if (c == '\'') {
        const size_t close = line.find('\'', i + 1);
        if (close == std::string::npos) return fail(first, "a single quote is not closed");
        text_piece() += line.substr(i + 1, close - i - 1);
        i = close;
      } else if (c == '\\') {
        if (i + 1 < line.size()) text_piece() += line[++i];
      } else if (c == '%') {
        const char f = i + 1 < line.size() ? line[++i] : '\0';
        if (f == 't') w.push_back({Piece::Kind::kTask, {}});
        if (f == 'o') w.push_back({Piece::Kind::kOffset, {}});
      } else {
        text_piece() += c;
      }
    }
    if (had_rest) return fail(first, "Task range specification with asterisk must be last");
    const Word& ranks_word = words.front();
    if (ranks_word.size() != 1 || ranks_word[0].kind != Piece::Kind::kText)
      return fail(first, "Invalid task range specification");
    const std::string& ranks = ranks_word[0].text;
    if (words.size() < 2) return fail(first, "no program after the task ranks " + ranks);
    const int index = static_cast<int>(m.lines_.size());
    int offset = 0;
    auto take = [&](int task) -> std::string {
      if (task >= ntasks) return "Invalid task id, " + std::to_string(task) + " >= ntasks";
      if (m.line_of_[static_cast<size_t>(task)] >= 0)
        return "Duplicate record for task " + std::to_string(task);
      m.line_of_[static_cast<size_t>(task)] = index;
      m.offset_[static_cast<size_t>(task)] = offset++;
      return "";
    };
    if (ranks == "*") {
      had_rest = true;
      for (int t = 0; t < ntasks; ++t) {  // offsets counted over all tasks, as Slurm's
        offset = t;
        if (m.line_of_[static_cast<size_t>(t)] < 0) (void)take(t);
      }
    } else {
      size_t from = 0;
      while (from <= ranks.size()) {
        size_t comma = ranks.find(',', from);
        if (comma == std::string::npos) comma = ranks.size();
        const std::string item = ranks.substr(from, comma - from);
        from = comma + 1;
        const size_t dash = item.find('-');
        const std::optional<int> lo = Number(item.substr(0, dash));
        const std::optional<int> hi =
            dash == std::string::npos ? lo : Number(item.substr(dash + 1));
        if (!lo || !hi) return fail(first, "Invalid task range specification (" + ranks + ")");
        if (*hi < *lo) return fail(first, "Invalid task range, " + item);
        for (int64_t t = *lo; t <= *hi; ++t) {
          if (std::string why = take(static_cast<int>(t)); !why.empty()) return fail(first, why);
        }
      }
    }
    m.lines_.push_back(Line{{words.begin() + 1, words.end()}});
  }
  for (int t = 0; t < ntasks; ++t) {
    if (m.line_of_[static_cast<size_t>(t)] < 0) {
      error = "Configuration file " + file + " invalid, no record for task id " + std::to_string(t);
      return std::nullopt;
    }
  }
  return m;
}

std::vector<std::string> MultiProg::ArgvFor(int task, const std::vector<std::string>& extra) const {
  std::vector<std::string> argv;
  if (task < 0 || static_cast<size_t>(task) >= line_of_.size()) return argv;
  for (const Word& w : lines_[static_cast<size_t>(line_of_[static_cast<size_t>(task)])].words) {
    std::string& a = argv.emplace_back();
    for (const Piece& p : w) {
      a += p.kind == Piece::Kind::kText   ? p.text
           : p.kind == Piece::Kind::kTask ? std::to_string(task)
                                          : std::to_string(offset_[static_cast<size_t>(task)]);
    }
  }
  argv.insert(argv.end(), extra.begin(), extra.end());
  return argv;
}

}  // namespace gantry::spec
