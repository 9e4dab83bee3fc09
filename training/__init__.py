"""How the embedded model's adapter is made. Never imported by the boxmaker package."""
