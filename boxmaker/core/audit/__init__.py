"""The audit log's records and views, the hash chain and its checkpoints, and what the
owner is shown from it (ask history, approval figures, grant suggestions). No I/O.
"""
