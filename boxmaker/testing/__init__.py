"""boxmaker.testing (see design.md section 2)."""
