"""Grants and what they decide over: the tool table, arguments, paths and hosts, grant
files, the decision's shape and the deny reasons. No I/O.
"""
