"""boxmaker.sandbox (see design.md section 2)."""
