"""brokerd: a boxmaker role (see design.md section 2). Imports boxmaker.core only."""
