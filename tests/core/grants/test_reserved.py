"""The places no grant may reach, as written and as resolved (pure; resolution passed in)."""

from __future__ import annotations

import pytest

from boxmaker.core.grants.loading import parse_grant_file
from boxmaker.core.grants.reserved import install_places, reserved_places, reserved_problem

LINKS = {"/var/lib/boxmaker": "/data/bx", "/etc/boxmaker/grants": "/etc/boxmaker/grants"}


def resolve(path: str) -> str:
    return LINKS.get(path, path)


PLACES = reserved_places(
    [("home", "/var/lib/boxmaker"), ("grants", "/etc/boxmaker/grants"), ("sockets", "")],
    resolve,
)


def test_each_place_is_kept_as_written_and_as_resolved_once() -> None:
    assert PLACES == (
        ("home", "/var/lib/boxmaker"),
        ("home", "/data/bx"),
        ("grants", "/etc/boxmaker/grants"),
    )


def test_relative_and_untidy_places_are_normalised_and_root_is_never_a_place() -> None:
    places = reserved_places([("home", "/a//b/"), ("x", "/"), ("y", "rel")], lambda p: "/")
    assert places == (("home", "/a/b"),)


def test_the_install_prefix_is_the_python_prefix_and_the_package_parent() -> None:
    places = install_places("/opt/venv", "/src/boxmaker/boxmaker/__init__.py")
    assert places == [("install prefix", "/opt/venv"), ("install prefix", "/src/boxmaker")]


@pytest.mark.parametrize(
    ("path", "reached"),
    [
        ("/var/lib/boxmaker", "home"),
        ("/var/lib", "home"),
        ("/var/lib/boxmaker/run/owner-broker", "home"),
        ("/data", "home"),
        ("/data/bx/audit", "home"),
        ("/etc/boxmaker", "grants"),
        ("/var/lib/boxmaker2", None),
        ("/data/b", None),
        ("/etc/boxmaker/grant", None),
        ("/home/owner/notes", None),
    ],
)
def test_a_path_that_is_contains_or_lies_under_a_place_is_refused(
    path: str, reached: str | None
) -> None:
    problem = reserved_problem(path, PLACES)
    if reached is None:
        assert problem is None
    else:
        assert problem is not None
        assert f"boxmaker's own {reached} " in problem
        assert problem.endswith("see runbook.md#grant-covers-boxmaker")


def test_a_grant_file_reaching_a_place_is_invalid_at_its_paths_line() -> None:
    text = (
        'tool = "shell"\nmode = "ask"\nmax_taint = "private"\nresult_class = "private"\n'
        '[constraints]\npaths = ["/home/owner/scratch", "/var/lib"]\n'
    )
    grant, problems = parse_grant_file("wide.toml", text.encode(), PLACES)
    assert grant is None
    assert [(p.line, "reaches boxmaker's own home" in p.problem) for p in problems] == [(6, True)]
    assert parse_grant_file("wide.toml", text.encode())[0] is not None  # no places: valid
