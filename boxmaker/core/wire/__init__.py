"""The wire: every socket's messages, frames, a connection's reading and writing, frame
fitting, SOCKS5 and addresses, the template child's frames. No I/O.
"""
