// The web console gantryd serves at "/" (src/server/console/console.html, compiled in):
// sign-in by token into an HttpOnly cookie, then the cluster map, queues, jobs with why
// they wait, a page per job, and usage, drawn from the API every 2 s.
#pragma once

namespace gantry::server {

extern const char* const kDashboardHtml;

}  // namespace gantry::server
