"""Tests of the data generator (run by hand: .tox/py311/bin/pytest training/tests)."""
