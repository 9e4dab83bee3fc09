"""Test helpers that work only from a checkout: they import pytest, gguf or numpy, or
read tests/ or scripts/ (issue 40). The fakes of production seams, which an installed
package can use, stay in `boxmaker.testing`. Imported as `support.<module>`: pytest puts
tests/ on the path for tests/conftest.py."""
