"""The front ends: the command line (app, commands), the REPL, exec, ACP, review and respond; peers
over one session, differing only in how they show events and ask for approval."""
