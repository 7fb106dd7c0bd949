"""dsh-plugin/manifest.json, the plugin's entry for a DSH plugin registry, says what the plugin is:
its tools are the catalogue's, its web slots and channel endpoints those the code uses, its DSH
range the one the tests pin, its install rows commands that name this plugin (no DSH, no Node)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from django.conf import settings

from tests.dsh import DSH_VERSION

PLUGIN = Path(settings.BASE_DIR) / "dsh-plugin"
MANIFEST = json.loads((PLUGIN / "manifest.json").read_text())
PACKAGE = json.loads((PLUGIN / "package.json").read_text())
# DSH Web's slot names as the client registers them (DSH-PLUGIN.md, "Slots" and "A management surface").
SLOT = re.compile(r"""['"]((?:conversation|sidebar|shell|settings)\.[a-z]+(?:\.[a-z]+)*)['"]""")


def test_the_manifest_names_the_package_it_describes():
    assert (MANIFEST["name"], MANIFEST["version"]) == (PACKAGE["name"], PACKAGE["version"])
    assert MANIFEST["engines"] == PACKAGE["engines"]
    assert "manifest.json" in PACKAGE["files"] and (PLUGIN / MANIFEST["configuration"]["patch"]).is_file()


def test_its_tools_are_the_plugins_catalogue():
    catalogue = [tool["name"] for tool in json.loads((PLUGIN / "src" / "catalogue.json").read_text())["tools"]]
    assert [tool["name"] for tool in MANIFEST["tools"]] == catalogue
    assert MANIFEST["surfaces"]["tools"] == catalogue
    assert all(tool["summary"] for tool in MANIFEST["tools"])


def test_its_web_slots_and_channel_are_the_ones_the_code_uses():
    client = "\n".join(path.read_text() for path in sorted((PLUGIN / "src" / "client").rglob("*.ts")))
    assert sorted(MANIFEST["surfaces"]["web"]["slots"]) == sorted(set(SLOT.findall(client)))
    host = (PLUGIN / "src" / "index.ts").read_text()
    [channel] = MANIFEST["surfaces"]["rpc"]
    assert f"RPC_CHANNEL = '{channel['channel']}'" in host and "authority: 'loopback'" in host
    channel_code = (PLUGIN / "src" / "channel.ts").read_text()
    handled = set(re.findall(r"rpcEndpoint [!=]== '([a-z-]+)'", channel_code))
    assert set(channel["endpoints"]) == handled


def test_it_names_every_variable_the_plugin_reads():
    patch = (PLUGIN / "cordis.patch.yml").read_text()
    token = (PLUGIN / "src" / "token.ts").read_text()
    read = set(re.findall(r"process\.env\.([A-Z_]+)", patch)) | set(re.findall(r"'(DSHLOOP_TOKEN_FD)'", token))
    assert read <= set(MANIFEST["configuration"]["environment"]) and "DSHLOOP_PORT" in read


def test_its_dsh_range_is_the_pinned_release():
    assert MANIFEST["engines"]["dsh"] == f">={DSH_VERSION} <0.1.0-rc.9"


def test_its_install_rows_add_this_plugin():
    commands = [row["command"] for row in MANIFEST["install"]]
    assert commands[0] == "dsh plugin --profile web add ./dsh-plugin"  # from a clone's root
    assert (Path(settings.BASE_DIR) / "dsh-plugin" / "package.json").is_file()
    assert "dshloop dsh install --profile web" in commands
    assert any(
        command.startswith("dsh plugin --profile web add 'git+https://") and "&path:dsh-plugin'" in command
        for command in commands
    )


def test_it_discloses_what_the_plugin_may_do():
    assert {item["kind"] for item in MANIFEST["capabilities"]} == {"timer", "session-write", "child-process", "network"}
