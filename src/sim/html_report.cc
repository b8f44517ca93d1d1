#include "sim/html_report.h"

#include <string_view>

#include "sim/html/assets.h"

namespace gantry::sim {

using Json = nlohmann::ordered_json;

namespace {

std::string Escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// JSON that is safe inside <script>: no '<' at all, so neither "</script" nor "<!--"
// can end or confuse the element ('<' only occurs inside JSON strings).
std::string ScriptSafe(const Json& j) {
  const std::string text = j.dump();
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    if (c == '<') {
      out += "\\u003c";
    } else {
      out += c;
    }
  }
  return out;
}

// Installed before anything else runs: errors end up in the page (data-errors on <html>,
// and visibly at the top), where the headless browser test looks for them.
constexpr const char* kErrorCapture = R"JS(
window.gantryErrors = [];
window.gantryError = function (message) {
  window.gantryErrors.push(String(message));
  document.documentElement.setAttribute('data-errors', JSON.stringify(window.gantryErrors));
  var box = document.getElementById('errors');
  if (box) box.textContent = 'Errors while drawing this report:\n' + window.gantryErrors.join('\n');
};
window.onerror = function (message, source, line, column) {
  window.gantryError(message + ' (line ' + line + ':' + column + ')');
};
window.addEventListener('unhandledrejection', function (e) {
  window.gantryError('unhandled rejection: ' + e.reason);
});
document.documentElement.setAttribute('data-errors', '[]');
)JS";

}  // namespace

void WriteHtml(std::ostream& out, const std::string& title, const std::string& subtitle,
               const std::vector<RunSummary>& runs) {
  Json data;
  data["title"] = title;
  data["subtitle"] = subtitle;
  data["table"] = ToJson(MainFigures(runs));
  Json list = Json::array();
  for (const RunSummary& r : runs) {
    list.push_back(Json{{"policy", r.policy},
                        {"report", r.report},
                        {"timeline", r.timeline},
                        {"wait_cdf", r.wait_cdf}});
  }
  data["runs"] = list;
  out << "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
      << "<meta name=\"generator\" content=\"gantry\">\n"
      << "<title>" << Escape(title) << "</title>\n"
      << "<style>\n"
      << html::kReportCss << "</style>\n"
      << "<script>" << kErrorCapture << "</script>\n"
      << "</head><body>\n<div id=\"errors\" class=\"errors\"></div>\n<div id=\"page\"></div>\n"
      << "<script type=\"application/json\" id=\"gantry-data\">" << ScriptSafe(data)
      << "</script>\n"
      << "<script>\n"
      << html::kReportJs << "</script>\n</body></html>\n";
}

}  // namespace gantry::sim
