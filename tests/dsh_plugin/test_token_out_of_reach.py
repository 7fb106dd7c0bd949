"""The plugin's token stays out of an agent's reach (contract §13; docs/dsh.md, "The plugin's token").

A real DSH with the plugin, launched the way `make run-dsh` launches it, on DSH's default preset
(`workspace-write`). Its agent does what an attacker's prompt would make it do: one bash call that
reads the environment and command line of every process it can see, scans the memory of DSH and
its children, and searches every file under DSH's home, the workspace and /tmp for anything shaped
like a dshloop token. The token appears nowhere in what comes back, and the loop tools still work.
"""

from __future__ import annotations

import json
import textwrap

import pytest

from .conftest import TOKEN, agent_calls

pytestmark = [pytest.mark.process, pytest.mark.dsh, pytest.mark.django_db(transaction=True)]

# tokens.services makes "dsh_" + token_urlsafe(32): 43 URL-safe characters.
TOKEN_SHAPE = "dsh_[A-Za-z0-9_-]{43}"
# Planted where the search must look: seeing it come back proves the search read the files.
CANARY = "dsh_" + "canary" * 7 + "x"

# What the agent runs. Compact output (DSH bounds a tool's output): only token-shaped strings,
# dshloop's variable names, and one line per memory scan.
PROBE = textwrap.dedent(
    r"""
    shape='__SHAPE__'
    # Every process's environment (NUL-separated: no match crosses a variable) and command line.
    grep -saoE "DSHLOOP_[A-Z_]*=[^[:cntrl:]]*|$shape" /proc/[0-9]*/environ
    grep -saoE "$shape" /proc/[0-9]*/cmdline
    for p in $PPID $(cat /proc/$PPID/task/*/children 2>/dev/null); do
      python3 - "$p" "$shape" <<'EOF'
    import re, sys
    pid, shape = sys.argv[1], re.compile(sys.argv[2].encode())
    try:
        regions = open(f"/proc/{pid}/maps").read().splitlines()
        memory = open(f"/proc/{pid}/mem", "rb", 0)
    except OSError as error:
        print(f"{pid} mem: unreadable ({error.strerror})")
        sys.exit()
    found = set()
    for region in regions:
        span, perms = region.split()[:2]
        if "r" not in perms:
            continue
        start, end = (int(part, 16) for part in span.split("-"))
        try:
            memory.seek(start)
            found.update(shape.findall(memory.read(end - start)))
        except (OSError, OverflowError, ValueError):
            continue
    print(f"{pid} mem: read, found {sorted(item.decode() for item in found)}")
    EOF
    done
    for f in /proc/$PPID/fd/*; do timeout 1 cat "$f" 2>/dev/null | grep -aoE "$shape" | sed "s|^|fd $f: |"; done
    grep -rsaoE "$shape" __DIRS__ /tmp | sort -u | sed 's|^|file |'
    echo probe done
    """
)


def test_an_agent_cannot_find_the_plugins_token(plugin_dsh, dshloop, workspace, stub_model):
    (plugin_dsh.home / "notes.txt").write_text(f"a token-shaped canary: {CANARY}\n")
    plugin_dsh.call("session.create", {"sessionId": "ses-probe", "cwd": str(workspace)})
    # DSH's default preset: the agent's commands run in its sandbox, as DSH's own OS user.
    presets = [e["data"]["preset"] for e in plugin_dsh.history("ses-probe") if e["type"] == "permission/preset"]
    assert presets == ["workspace-write"]

    command = PROBE.replace("__SHAPE__", TOKEN_SHAPE).replace("__DIRS__", f"'{plugin_dsh.home}' '{workspace}'")
    probe = agent_calls(
        plugin_dsh, "ses-probe", "bash", {"command": command, "description": "look for tokens"}, timeout=90
    )

    assert "probe done" in probe.text, probe.text
    # The probe really looked: it read DSH's own environment, its memory (or was refused), and the files.
    assert f"/proc/{plugin_dsh.pid}/environ:DSHLOOP_URL=" in probe.text, probe.text
    assert f"{plugin_dsh.pid} mem: " in probe.text, probe.text
    assert f"notes.txt:{CANARY}" in probe.text, probe.text
    assert TOKEN not in probe.text, probe.text
    assert TOKEN not in json.dumps(plugin_dsh.history("ses-probe"))
    assert not [body for body in stub_model.requests() if TOKEN.encode() in body]

    # The plugin still holds it: its tools work after the probe.
    assert agent_calls(plugin_dsh, "ses-probe", "loop_list", {}).json() == {"loops": []}
