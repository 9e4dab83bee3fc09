"""The shared core, pure: no sockets, files, environment, clock, randomness or
logging. Time, grants, state and bytes are arguments; values are returned.

Its floors, each importing only the floors below it (`.importlinter`'s core-layers
contract; `|` keeps a floor's rooms apart):

    policy | display     the decision; what is shown to a person (escaping for the
                         terminal and Mattermost, reply rendering)
    wire | sanitize      every socket's messages, frames, connections, SOCKS5; the
                         sanitizer and its character tables
    audit | model        the audit log's records, views, chain and checkpoints; the
                         model's language (templates, dialects, call syntaxes,
                         reasoning, sampling, the context budget, a served
                         model's token-id protocol)
    grants | home        the tool table, arguments, paths and hosts, grant files,
                         decisions and deny reasons; the home's layout, links, secrets
    ground               errors, fitting, timestamps, hashes, ids, labels, runbook,
                         strict
"""
