// The dashboard gantryd serves at "/": one static page that asks for a token (kept in the
// browser's localStorage) and renders /v1/queues, /v1/nodes and /v1/jobs every 2 s.
#pragma once

namespace gantry::server {

extern const char* const kDashboardHtml;

}  // namespace gantry::server
