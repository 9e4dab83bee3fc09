"""The I/O layer every role stands on: sockets, role processes, durable files.

Shared like `boxmaker.sandbox`, never a role: it imports only `boxmaker.core`.

    server   bind a link's socket, accept with a cap and back-off, read a request
             by its deadline, hand it to the handler of its kind, answer
             (`serve_forever`, `Connection`)
    client   one request and its answers by a deadline (`Request`)
    role     a role's logging, configuration, stop signals and exit status
    files    atomic, durable file replacement, and durable appends
    secrets  a role's secrets read at start (never loopd's: it holds none)
    template_worker  a model file's chat template compiled and rendered in a child
             process under an address-space cap and a wall-clock kill (`WorkerTemplate`)
    template_child   that child's side
"""
