"""boxmaker's one C module: the flag rules' fold and word pass (boxmaker/core/sanitize/_fold.c).

Everything else is in setup.cfg. The module is optional: without a C compiler or
Python's headers boxmaker installs and runs the same pass in Python
(`boxmaker.core.sanitize.word_pass`, slower; brokerd logs which at start). It is
built with the interpreter's own flags, never for this host's CPU alone.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "boxmaker.core.sanitize._fold",
            sources=["boxmaker/core/sanitize/_fold.c"],
            extra_compile_args=["-std=c11", "-Wall", "-Wextra"],
            optional=True,
        )
    ]
)
