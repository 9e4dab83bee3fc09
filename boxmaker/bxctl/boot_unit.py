"""The boot service of a root install: a systemd unit that runs boxmaker's supervisord.

Pure but for `systemd_running` (a stat of /run/systemd/system) and the steps it
returns, which `bxctl install` applies (`install_steps`). The unit:

- runs supervisord in the foreground (`--nodaemon`) with boxmaker's
  configuration, so systemd sees the tree's one parent process and restarts it if
  it dies (Restart=on-failure);
- before it, prepares the sandbox's cgroups, the part of
  scripts/prepare-sandbox-host that every boot needs (`--boot`: the cgroup
  parents handed to brokerd's user; on a hybrid host the v1 mounts crun wants),
  from a copy of the script installed beside bxctl, so the unit does not depend
  on the checkout;
- sets the descriptor limit brokerd raises its own to (LimitNOFILE, its
  MAX_DESCRIPTORS: `boxmaker.brokerd.descriptors`);
- stops supervisord alone first (KillMode=mixed: SIGTERM to it, which stops the
  roles in order; SIGKILL to whatever is left after TimeoutStopSec).

Where systemd is PID 1 the install writes the unit, reloads systemd, and enables
and starts it; elsewhere (a container, a machine booted otherwise) it writes the
unit and says what to run instead.
"""

from __future__ import annotations

from pathlib import Path

from boxmaker.bxctl.install_steps import Command, Directory, File, Step

UNIT_NAME = "boxmaker.service"
SYSTEM_UNITS = Path("/etc/systemd/system")
SYSTEMD_RUNNING = Path("/run/systemd/system")  # sd_booted(3): present when systemd is PID 1
DESCRIPTORS = 65_536  # brokerd's MAX_DESCRIPTORS
PREPARE = "boxmaker-prepare-sandbox-host"  # the copy beside bxctl


# what a unit's command line would read as something else: quoting, specifiers, variables
UNSAFE = frozenset(" \t\n\"'\\%$;")


def unsafe_path(path: Path) -> str | None:
    """Why `path` cannot be written into the unit's command lines (None: it can)."""
    bad = sorted(set(str(path)) & UNSAFE)
    return f"{path} holds {' '.join(map(repr, bad))}" if bad else None


def unit_text(*, bin_dir: Path, etc: Path, broker_user: str) -> str:
    """The unit file for a root install whose programs are in `bin_dir` (paths checked
    with `unsafe_path` first)."""
    conf = etc / "supervisord.conf"
    return f"""\
# boxmaker's boot service, written by `bxctl install` and kept in step by it
# (docs/install.md, "Installing for real"): change boxmaker's own files in {etc}/, and this
# unit only with a drop-in (`systemctl edit boxmaker`).
[Unit]
Description=boxmaker, the owner's agent harness (supervisord and its roles)
After=network-online.target local-fs.target
Wants=network-online.target

[Service]
Type=simple
# the sandbox's cgroups do not survive a reboot (scripts/prepare-sandbox-host --boot)
ExecStartPre={bin_dir / PREPARE} --boot --user {broker_user}
ExecStart={bin_dir / "supervisord"} --nodaemon --configuration {conf}
KillMode=mixed
TimeoutStopSec=90
Restart=on-failure
RestartSec=5
LimitNOFILE={DESCRIPTORS}
# Secrets as systemd credentials: add, in a drop-in (systemctl edit boxmaker),
#   LoadCredentialEncrypted=mattermost_token:/etc/boxmaker/credentials/mattermost_token.cred
# made with `systemd-creds encrypt --name=mattermost_token token.txt <that path>`.
# systemd decrypts it into a memory-backed directory private to this unit and
# sets $CREDENTIALS_DIRECTORY, which supervisord passes on to the roles; a role
# reads it with `[secrets.<name>] credential = "<name>"`. systemd lets only this
# unit's user (root) read those files, and each role runs as its own user: in a
# root install a role cannot read the unit's credentials, so give it a `file`
# owned by its user instead (docs/grants.md, "Secrets").

[Install]
WantedBy=multi-user.target
"""


def systemd_running() -> bool:
    return SYSTEMD_RUNNING.is_dir()


def unit_path(etc: Path) -> Path:
    """Where the unit goes: <prefix>/etc/systemd/system, `etc` being <prefix>/etc/boxmaker."""
    return etc.parent / "systemd" / "system" / UNIT_NAME


def boot_steps(*, bin_dir: Path, etc: Path, broker_user: str, prepare_script: str) -> list[Step]:
    """The boot service's files: the script's copy and the unit."""
    unit = unit_path(etc)
    return [
        Directory(unit.parent, 0o755, "root", "root"),
        File(bin_dir / PREPARE, prepare_script, 0o755, "root", "root"),
        File(unit, unit_text(bin_dir=bin_dir, etc=etc, broker_user=broker_user), 0o644),
    ]


def start_steps(etc: Path, running: bool) -> list[Command]:
    """Reloading systemd, then enabling and starting the unit: with systemd running and
    the install in the machine's own /etc only (none otherwise)."""
    if not running or unit_path(etc).parent != SYSTEM_UNITS:
        return []
    return [
        Command(("systemctl", "daemon-reload"), "systemctl daemon-reload"),
        Command(
            ("systemctl", "enable", "--now", UNIT_NAME),
            f"systemctl enable --now {UNIT_NAME} (starts the tree now and at every boot)",
        ),
    ]


def not_booted_hint(bin_dir: Path, etc: Path, broker_user: str, *, dry_run: bool = False) -> str:
    """What to run where the unit cannot start it (systemd is not PID 1, or the install
    went under another prefix)."""
    written = "would be written" if dry_run else "is written"
    return (
        f"the boot service {unit_path(etc)} {written} but not started (systemd is not PID 1 "
        f"here, or the prefix is not /): start the tree with {bin_dir / PREPARE} --boot "
        f"--user {broker_user}, then {bin_dir / 'supervisord'} -c {etc / 'supervisord.conf'}"
    )
