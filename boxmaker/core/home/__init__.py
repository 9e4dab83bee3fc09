"""The owner's home: its layout, the links between roles, secrets and the settings checks.
No I/O.
"""
