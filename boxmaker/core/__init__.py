"""The shared core: wire messages and framing, grants, argument checks, policy.

Everything here is pure: no sockets, files, environment, clock, randomness or
logging. Time, grants, state and bytes are arguments; values are returned.
"""
