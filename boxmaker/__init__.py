"""boxmaker: an agent harness whose every tool call is decided, audited and confined.

The package has one shared, pure layer (`boxmaker.core`) and one subpackage per
role (`brokerd`, `loopd`, `memoryd`, `gatewayd`, `bxctl`). A role imports
`boxmaker.core` and never another role; the import-linter contracts in
`.importlinter` enforce it (`lint-imports`, run by `tox -e lint`).
"""

__version__ = "0.1.0"
