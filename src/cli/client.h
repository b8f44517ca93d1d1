// The gantry CLI's client commands: submit, ls, show, cancel, logs, nodes, queues,
// usage, drain, resume. Each is a thin HTTP/JSON call to gantryd (docs/api.yaml).
//
// The server comes from --server, else $GANTRY_SERVER, else http://127.0.0.1:8080; the
// token from --token, else $GANTRY_TOKEN. AddClientCommands registers the subcommands
// (and the global --server/--token) on the gantry app; when one of them ran, its
// callback stores its exit status in `exit_code`: 0 success, 1 failure at run time
// (server unreachable, 5xx), 2 bad input (the server's 4xx, with its message).
// Thread-safety: none (a command-line front end).
#pragma once

#include <CLI/CLI.hpp>

namespace gantry::cli {

void AddClientCommands(CLI::App& app, int& exit_code);

}  // namespace gantry::cli
