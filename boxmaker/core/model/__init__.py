"""The model's language: chat formats and templates, dialects, tool-call syntaxes and
readers, reasoning, the reply stream, sampling, the context budget. No I/O.
"""
