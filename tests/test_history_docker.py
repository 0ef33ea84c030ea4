"""The memory history on the real engine: a turn's change is recorded with its sender,
and the container can neither read nor write the history."""

from __future__ import annotations

import pytest

from tests.test_learned_docker import replies, served  # noqa: F401 - served is a fixture

pytestmark = pytest.mark.docker


def test_the_history_is_out_of_the_containers_reach(served, docker_client) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    from orchestrator.memory.history import TURN, History

    replies(served, "remember that the boiler is serviced in May", sender="bob")
    history = History(served.home.groups_dir, "fam")
    change = history.log()[0]
    assert (change.provenance.kind, change.provenance.sender) == (TURN, "bob")
    assert (served.home.groups_dir / "fam/.history/HEAD").is_file()
    container = docker_client.containers.get(f"{served.project}.fam")
    probe = container.exec_run(
        [
            "python3",
            "-c",
            "import errno, os\n"
            "found = [d for d, ds, fs in os.walk('/') if not d.startswith(('/proc', '/sys')) "
            "and ('.history' in ds or 'orchestrator-snapshot.json' in fs)]\n"
            "print('found', found)\n"
            "for path in ('/workspace/agent/.history/HEAD', "
            "'/workspace/agent/memory/../.history/HEAD'):\n"
            "    try:\n"
            "        open(path, 'w').write('pwned')\n"
            "        print('wrote', path)\n"
            "    except OSError as exc:\n"
            "        print('refused', path, errno.errorcode[exc.errno])\n",
        ]
    )
    out = probe.output.decode()
    assert "found []" in out, out
    assert "wrote" not in out and out.count("refused") == 2, out
    assert (served.home.groups_dir / "fam/.history/HEAD").read_text().startswith("ref: ")
