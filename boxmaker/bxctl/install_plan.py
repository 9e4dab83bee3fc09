"""What `bxctl install` lays out: every step, in order, for a root install or a dev one.

I/O: reads the package data (example grants, supervisord's templates) and whether
this user can make cgroups; the steps themselves are `install_steps`'s, run by
`install_cmd`.

Run as root, it lays out what the link table says (`boxmaker.core.home.links`): each
role its own user (bx-broker, bx-memory, bx-loop, bx-gateway), each link a group
holding exactly its client roles' users (the owner's user, for the owner's
links), and each link's directory, `<home>/run/<directory>/`, the serving role's
user's and the link's group's, with the link's root modes (2750; the socket 0660).

loop.sock has two clients, the owner (`bxctl chat`) and gatewayd (the owner's
Mattermost messages), so bx-loop-clients holds the owner and bx-gateway. No other
link's group holds bx-gateway: approvals come to gatewayd over gateway.sock, and
it never reaches brokerd's admin.sock. So loopd's user cannot even open either
admin.sock, nor brokerd's user loopd's memory socket, nor gatewayd's user either
admin.sock: the kernel refuses it. The directories are made here, before the
roles start, with their groups; a role only sets the mode at bind time, and the
set-group-id bit gives the socket the directory's group. memoryd's files
(`<home>/memory/`) are bx-memory's alone, 0700. Config goes under
`<prefix>/etc/boxmaker`, state under `<prefix>/var/lib/boxmaker`, logs under
`<prefix>/var/log/boxmaker`. Run as anyone else it installs dev mode in one
directory: every role as that user, directories 0700, sockets 0600 (`--dev` asks
for that as root too).

gatewayd.toml is written with an empty `[mattermost] url`: until the owner sets
it (with `owner` and `[secrets.mattermost_token]`), gatewayd says so in one line
and exits 0, and supervisord leaves it EXITED (runbook.md#gateway-not-configured).
Configuration and grant files are written only when missing (the grants seeded
from the example grants when the directory is empty); supervisord's files are
boxmaker's own and kept in step. `--dry-run` prints the steps and changes nothing.
The example grants and supervisord's templates are package data
(`boxmaker/bxctl/data/`, linked from the checkout's `grants.example/` and
`supervisor.conf.d/`) read with importlib.resources, so a dev install works
from an installed wheel as well as from a checkout. A root install also runs
`prepare-sandbox-host`, package data too (the checkout's `scripts/prepare-sandbox-host`
is a link to it), so it needs no checkout either.

Dev mode also makes a small workspace (`--workspace`, default
`~/boxmaker-workspace`): `notes/` with a welcome note, `notes/keys/` with a file
the example deny grant keeps from the model, and `scratch/`; and the example
grants it seeds point there instead of at `/home/owner`, so they work on a
fresh machine. The workspace must lie outside every place no grant may reach
(boxmaker's home, grants, install prefix and checkout: `boxmaker.core.grants.reserved`).
"""

from __future__ import annotations

import grp
import importlib.resources
import os
import pwd
from collections.abc import Sequence
from dataclasses import dataclass
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

import tomli_w

import boxmaker
from boxmaker.bxctl.boot_unit import boot_steps
from boxmaker.bxctl.install_steps import Bytecode, Command, Directory, File, Group, Step, User
from boxmaker.core.home.layout import Home
from boxmaker.core.home.links import LINKS, ROLE_USERS, Link, Role
from boxmaker.core.runbook import Runbook

PACKAGE_DIR = Path(boxmaker.__file__).parent  # whose bytecode the roles load
PROGRAMS = ("brokerd.conf", "memoryd.conf", "loopd.conf", "gatewayd.conf", "group.conf")
SANDBOX_CGROUPS = (
    Path("/sys/fs/cgroup/memory/boxmaker"),
    Path("/sys/fs/cgroup/pids/boxmaker"),
)


@dataclass(frozen=True)
class Layout:
    root: bool
    etc: Path
    home: Path
    log: Path
    run: Path  # supervisord's socket and pid file
    bin: Path  # the console scripts
    owner: str
    workspace: Path | None = None  # dev mode: what the seeded grants point at


def data_dir() -> Traversable:
    """The package data: `grants.example/`, `supervisor.conf.d/`, `prepare-sandbox-host`."""
    return importlib.resources.files("boxmaker.bxctl") / "data"


def prepare_script() -> Path:
    """The sandbox host's preparation script, as a file a root install can run."""
    return Path(str(data_dir() / "prepare-sandbox-host"))


EXAMPLE_HOME = "/home/owner"  # what grants.example's paths start with
WELCOME = """# Welcome to boxmaker

This folder is the workspace of your dev install.
Anything under notes/ can be read without asking, but never notes/keys/.
Files in scratch/ can be written without asking.
Shell commands in scratch/ run only after you approve each one.
brokerd decides every call and writes it to the audit log first.

Two commands to try:

    bxctl approvals          lists the calls that wait for your approval
    bxctl audit verify       checks the audit log from its first record
"""
NOT_A_KEY = "not a real key: the keys-deny grant keeps the model from reading it\n"


def workspace_steps(workspace: Path) -> list[Step]:
    return [
        Directory(workspace, 0o700),
        Directory(workspace / "notes", 0o700),
        Directory(workspace / "notes" / "keys", 0o700),
        Directory(workspace / "scratch", 0o700),
        File(workspace / "notes" / "welcome.md", WELCOME, 0o600, keep=True),
        File(workspace / "notes" / "keys" / "id", NOT_A_KEY, 0o600, keep=True),
    ]


def _sandbox_ready() -> bool:
    """Can this (dev) user make per-call cgroups? Else tools are refused, not run weaker."""
    v2 = Path("/sys/fs/cgroup/boxmaker")
    if Path("/sys/fs/cgroup/cgroup.controllers").exists():
        return os.access(v2, os.W_OK)
    return all(os.access(p, os.W_OK) for p in SANDBOX_CGROUPS) and Path("/usr/bin/bwrap").exists()


def _with_header(header: str, config: dict[str, Any]) -> str:
    """`config` as TOML (tomli-w does the quoting), after `header`'s lines as comments."""
    comments = "".join(f"# {line}\n" for line in header.splitlines())
    return comments + tomli_w.dumps(config)


def brokerd_toml(layout: Layout, backend: str) -> str:
    return _with_header(
        "brokerd.toml, written by bxctl install; every key not named has its default",
        {
            "paths": {"home": str(layout.home), "grants": str(layout.etc / "grants")},
            "sockets": {"group_access": layout.root},
            "runner": {"backend": backend},
        },
    )


def loopd_toml(layout: Layout) -> str:
    return _with_header(
        "loopd.toml, written by bxctl install; every key not named has its default\n"
        '[model] path "" is the embedded default model; name a GGUF file to use your own',
        {
            "paths": {"home": str(layout.home)},
            "model": {"path": ""},
            # a root install: the owner's user, the one peer of loop.sock's owner kinds
            "sockets": {"group_access": True, "owner_user": layout.owner}
            if layout.root
            else {"group_access": False},
        },
    )


def memoryd_toml(layout: Layout) -> str:
    return _with_header(
        "memoryd.toml, written by bxctl install; every key not named has its default",
        {
            "paths": {"home": str(layout.home)},
            "sockets": {"group_access": layout.root},
        },
    )


def gatewayd_toml(layout: Layout) -> str:
    """gatewayd.toml with no server yet: gatewayd stays stopped until the owner names one."""
    start = f"supervisorctl -c {layout.etc / 'supervisord.conf'} start boxmaker:gatewayd"
    return _with_header(
        "gatewayd.toml, written by bxctl install; every key not named has its default\n"
        "gatewayd, the Mattermost bot, stays stopped until [mattermost] url is set. Set\n"
        "  [mattermost] url: your server, https://chat.example.com\n"
        "  [mattermost] owner: your Mattermost user id (26 characters of a-z and 0-9)\n"
        "  [secrets.mattermost_token]: where the bot's token is read (file, credential or env)\n"
        "    (a token file must be 0600 and belong to the user gatewayd runs as)\n"
        f"then start it: {start}\n"
        f"{Runbook.GATEWAY_NOT_CONFIGURED.pointer}",
        {
            "paths": {"home": str(layout.home)},
            "sockets": {"group_access": layout.root},
            "mattermost": {"url": ""},
        },
    )


def supervisor_files(layout: Layout) -> list[File]:
    templates = data_dir() / "supervisor.conf.d"
    files = []
    users = {str(role): user for role, user in ROLE_USERS.items()} if layout.root else {}
    for name in PROGRAMS:
        text = (templates / name).read_text(encoding="utf-8")
        program = name.removesuffix(".conf")
        user = f"user={users[program]}" if program in users else ""
        rendered = text.format(bin=layout.bin, etc=layout.etc, log=layout.log, user=user)
        files.append(File(layout.etc / "supervisor.conf.d" / name, rendered, 0o644))
    owner_group = layout.owner if not layout.root else _primary_group(layout.owner)
    main = (
        (templates / "supervisord.conf")
        .read_text(encoding="utf-8")
        .format(
            run=layout.run,
            log=layout.log,
            etc=layout.etc,
            socket_mode="0770" if layout.root else "0700",
            chown=f"chown=root:{owner_group}" if layout.root else "",
        )
    )
    files.append(File(layout.etc / "supervisord.conf", main, 0o644))
    return files


def _primary_group(user: str) -> str:
    return grp.getgrgid(pwd.getpwnam(user).pw_gid).gr_name


def plan(layout: Layout, links: Sequence[Link] = LINKS) -> list[Step]:
    """Every step of the install, in order; a root install's users, groups and socket
    directories are those of `links`."""
    steps: list[Step] = []
    grants = layout.etc / "grants"
    home = Home(layout.home)
    if layout.root:
        users = {**ROLE_USERS, Role.OWNER: layout.owner}
        broker, memory, loop, gateway = (
            ROLE_USERS[r] for r in (Role.BROKERD, Role.MEMORYD, Role.LOOPD, Role.GATEWAYD)
        )
        steps += [User(user) for user in ROLE_USERS.values()]
        steps += [Group(link.group, tuple(users[role] for role in link.clients)) for link in links]
        steps += [
            Directory(layout.etc, 0o755, "root", "root"),
            Directory(grants, 0o750, "root", broker),
            Directory(layout.etc / "supervisor.conf.d", 0o755, "root", "root"),
            Directory(layout.home, 0o755, "root", "root"),
            Directory(home.run, 0o755, "root", "root"),
            *(
                Directory(
                    home.link_directory(link), link.root.directory, users[link.server], link.group
                )
                for link in links
            ),
            Directory(home.egress, 0o700, broker, broker),
            Directory(home.broker_sessions.parent, 0o700, broker, broker),
            Directory(home.audit, 0o700, broker, broker),
            Directory(home.loop_sessions.parent, 0o700, loop, loop),
            Directory(home.models, 0o755, loop, loop),
            Directory(home.memory, 0o700, memory, memory),
            Directory(home.gateway, 0o700, gateway, gateway),
            Directory(layout.log, 0o750, "root", _primary_group(layout.owner)),
            Directory(layout.run, 0o750, "root", _primary_group(layout.owner)),
            File(
                layout.etc / "brokerd.toml",
                brokerd_toml(layout, "bwrap"),
                0o640,
                "root",
                broker,
                keep=True,
            ),
            File(layout.etc / "loopd.toml", loopd_toml(layout), 0o640, "root", loop, keep=True),
            File(
                layout.etc / "memoryd.toml",
                memoryd_toml(layout),
                0o640,
                "root",
                memory,
                keep=True,
            ),
            File(
                layout.etc / "gatewayd.toml",
                gatewayd_toml(layout),
                0o640,
                "root",
                gateway,
                keep=True,
            ),
        ]
        grant_owner: tuple[str | None, str | None] = ("root", broker)
    else:
        backend = "bwrap" if _sandbox_ready() else "refusing"
        steps += [
            Directory(layout.etc, 0o700),
            Directory(grants, 0o700),
            Directory(layout.etc / "supervisor.conf.d", 0o700),
            Directory(layout.home, 0o700),
            Directory(layout.log, 0o700),
            Directory(layout.run, 0o700),
            File(layout.etc / "brokerd.toml", brokerd_toml(layout, backend), 0o600, keep=True),
            File(layout.etc / "loopd.toml", loopd_toml(layout), 0o600, keep=True),
            File(layout.etc / "memoryd.toml", memoryd_toml(layout), 0o600, keep=True),
            File(layout.etc / "gatewayd.toml", gatewayd_toml(layout), 0o600, keep=True),
        ]
        grant_owner = (None, None)
    if layout.workspace is not None:
        steps += workspace_steps(layout.workspace)
    if not any(grants.glob("*.toml")):
        entries = (data_dir() / "grants.example").iterdir()
        examples = sorted((e for e in entries if e.name.endswith(".toml")), key=lambda e: e.name)
        for example in examples:
            text = example.read_text(encoding="utf-8")
            if layout.workspace is not None:
                text = text.replace(EXAMPLE_HOME, str(layout.workspace))
            steps.append(File(grants / example.name, text, 0o640, *grant_owner, keep=True))
    steps += supervisor_files(layout)
    if os.access(PACKAGE_DIR, os.W_OK):  # else installed by another user, bytecode and all
        steps.append(Bytecode(PACKAGE_DIR))
    if layout.root:
        script = prepare_script()
        steps.append(
            Command(
                # bash by name: package data need not keep its executable bit
                ("bash", str(script), "--user", ROLE_USERS[Role.BROKERD]),
                "the sandbox host (prepare-sandbox-host)",
            )
        )
        steps += boot_steps(
            bin_dir=layout.bin,
            etc=layout.etc,
            broker_user=ROLE_USERS[Role.BROKERD],
            prepare_script=script.read_text(encoding="utf-8"),
        )
    return steps
