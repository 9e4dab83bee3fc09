"""What is shown to a person: escaping for the terminal and for Mattermost, hidden
characters, reply rendering, the untrusted-origin notes. No I/O.
"""
