"""A dataset upload is parsed in bounded memory (issue 21.3), measured in a real Daphne
server: a 48 MB one-line JSONL of nested empty lists is refused with a 400 naming the
line and the limit, and neither that upload nor the preview of such a file stored
before the limits existed grows the server by 50 MB or costs it a second of CPU."""

from __future__ import annotations

import http.client
import json
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from dashtest import PY, ROOT, embedded_daphne, embedded_env

pytestmark = pytest.mark.slow
MB = 1 << 20
BOMB_BYTES = 48 * MB

SETUP = """
from importlib import import_module
from django.conf import settings
from django.contrib import auth
u = auth.get_user_model().objects.create_user("bomber", password="pw-bomber-123")
s = import_module(settings.SESSION_ENGINE).SessionStore()
s[auth.SESSION_KEY] = str(u.pk)
s[auth.BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
s[auth.HASH_SESSION_KEY] = u.get_session_auth_hash()
s.create()
print("SESSION", s.session_key, u.pk)
"""

# A dataset accepted before the row limits existed: the file is already stored.
OLD_DATASET = """
import sys
from dashboard.models import Dataset
ds = Dataset.objects.create(owner_id=int(sys.argv[1]), name="old.jsonl",
    path=sys.argv[2], rows=1, fields=["prompt", "answer", "pad"], size=int(sys.argv[3]))
print("DATASET", ds.pk)
"""


WARM = b'{"prompt": "what is 2 + 2 ?", "answer": "4"}\n'


def bomb(size: int = BOMB_BYTES) -> bytes:
    """One JSONL line: a valid row whose ``pad`` holds ~16 M empty lists."""
    head, tail = b'{"prompt": "p", "answer": "a", "pad": [', b"[]]}\n"
    return head + b"[]," * ((size - len(head) - len(tail)) // 3) + tail


def _shell(env: dict[str, str], script: str, *args: str) -> str:
    """Run ``script`` with Django set up in the server's environment; its last line."""
    out = subprocess.run(
        [PY, "-c", _DJANGO + script, *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return out.strip().splitlines()[-1]


_DJANGO = (
    "import django, os; os.environ.setdefault('DJANGO_SETTINGS_MODULE', "
    "'dashboard.settings'); django.setup()\n"
)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    var = tmp_path_factory.mktemp("var")
    env = embedded_env(var)
    migrate = [PY, "manage.py", "migrate", "-v", "0"]
    subprocess.run(migrate, cwd=ROOT, env=env, check=True)
    _, session, user_id = _shell(env, SETUP).split()
    with embedded_daphne(env) as (port, proc):
        server = {
            "port": port,
            "proc": proc,
            "env": env,
            "var": var,
            "session": session,
            "user": user_id,
        }
        # Warm up: the first upload imports the trainer (and torch), which is not
        # what a bomb costs.
        status, page = _upload(server, "warm.jsonl", WARM)
        assert status == 302, page[:2000]
        yield server


def _stored(server) -> list[str]:
    folder = server["var"] / "data" / "uploads" / server["user"]
    return sorted(p.name for p in folder.iterdir())


class Peak:
    """The server's peak RSS growth (``/proc/<pid>/status`` VmHWM after resetting it)
    and the CPU seconds it spent, around one request."""

    def __init__(self, proc) -> None:
        self.proc = proc

    def __enter__(self) -> Peak:
        Path(f"/proc/{self.proc.pid}/clear_refs").write_text("5")
        self.rss = self.proc.memory_info().rss
        self.cpu = sum(self.proc.cpu_times()[:2])
        self.start = time.monotonic()
        return self

    def __exit__(self, *exc) -> None:
        status = Path(f"/proc/{self.proc.pid}/status").read_text()
        hwm = next(ln for ln in status.splitlines() if ln.startswith("VmHWM:"))
        self.grew_mb = (int(hwm.split()[1]) * 1024 - self.rss) / MB
        self.cpu_s = sum(self.proc.cpu_times()[:2]) - self.cpu
        wall = time.monotonic() - self.start
        print(
            f"peak RSS growth {self.grew_mb:.1f} MB, server CPU {self.cpu_s:.2f} s, "
            f"answered in {wall:.2f} s"
        )


def _request(server, method: str, path: str, body: bytes = b"", headers=None):
    conn = http.client.HTTPConnection("127.0.0.1", server["port"], timeout=300)
    csrf = "c" * 32
    cookies = f"sessionid={server['session']}; csrftoken={csrf}"
    conn.request(method, path, body, {"Cookie": cookies, **(headers or {})})
    answer = conn.getresponse()
    try:
        return answer.status, answer.read().decode("utf-8", "replace")
    finally:
        conn.close()


def _upload(server, name: str, content: bytes):
    boundary = uuid.uuid4().hex
    part = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; '
        f'filename="{name}"\r\nContent-Type: application/octet-stream\r\n\r\n'
    ).encode()
    fields = b"".join(
        f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'.encode()
        for k, v in {"csrfmiddlewaretoken": "c" * 32, "name": ""}.items()
    )
    body = fields + part + content + f"\r\n--{boundary}--\r\n".encode()
    kind = f"multipart/form-data; boundary={boundary}"
    return _request(server, "POST", "/datasets/", body, {"Content-Type": kind})


def test_a_48_mb_one_line_bomb_is_refused_cheaply_naming_the_line_and_limit(server):
    content = bomb()
    with Peak(server["proc"]) as peak:
        status, page = _upload(server, "bomb.jsonl", content)
    assert status == 400, page[:2000]
    assert "file: line 1 is longer than the limit of 1 MB" in page
    assert "(DATASET_MAX_ROW_BYTES)" in page
    assert peak.grew_mb < 50
    assert peak.cpu_s < 1.0
    assert _stored(server) == ["warm.jsonl"]  # nothing of the bomb stored


def test_the_preview_of_a_bomb_stored_before_the_limits_is_bounded_and_kept(server):
    folder = server["var"] / "data" / "uploads" / server["user"]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "old.jsonl"
    path.write_bytes(bomb())
    line = _shell(
        server["env"], OLD_DATASET, server["user"], str(path), str(BOMB_BYTES)
    )
    dataset_id = line.split()[1]
    for _ in range(2):  # the first computes and stores the preview, the second reads it
        with Peak(server["proc"]) as peak:
            status, page = _request(server, "GET", f"/datasets/{dataset_id}/")
        assert status == 200, page[:2000]
        assert "line 1 is longer than the limit of 1 MB" in page
        assert peak.grew_mb < 50
        assert peak.cpu_s < 1.0


def test_a_large_valid_upload_arrives_whole_through_daphne(server):
    rows = [
        {"prompt": f"what is {i} + 3 ?", "answer": str(i + 3)} for i in range(60_000)
    ]
    content = "".join(json.dumps(r) + "\n" for r in rows).encode()  # about 3 MB
    status, page = _upload(server, "big.jsonl", content)
    assert status == 302, page[:2000]
    folder = server["var"] / "data" / "uploads" / server["user"]
    assert (folder / "big.jsonl").read_bytes() == content
