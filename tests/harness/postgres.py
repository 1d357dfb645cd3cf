"""A throwaway PostgreSQL cluster for a test: Debian's postgresql binaries, initdb into a
temporary folder and pg_ctl start on a free port (as the `postgres` user: PostgreSQL refuses to
run as root), trust authentication for user `wan` on 127.0.0.1 — or a password, to test a wrong
one. Removed when the test is done. Missing binaries fail the test saying how to install them."""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import uuid

from harness.ranks import free_port


class Postgres:
    def __init__(self, password: str | None = None):
        found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
        if not found:
            raise RuntimeError("PostgreSQL is not installed: apt-get install -y postgresql (.ci/run does it)")
        self.bin = os.path.dirname(found[-1])
        self.root = tempfile.mkdtemp(prefix="parallel_wan_pg_")
        self.data, self.port, self.password = os.path.join(self.root, "data"), free_port(), password
        self._as_postgres = os.geteuid() == 0
        if self._as_postgres:
            user = pwd.getpwnam("postgres")
            os.chown(self.root, user.pw_uid, user.pw_gid)
        args = ["-D", self.data, "-U", "wan", "-A", "password" if password else "trust"]
        if password:
            pwfile = os.path.join(self.root, "pw")
            with open(pwfile, "w") as f:
                f.write(password)
            if self._as_postgres:
                os.chown(pwfile, user.pw_uid, user.pw_gid)
            args += [f"--pwfile={pwfile}"]
        self._run("initdb", *args)
        self.start()
        self.database = f"q_{uuid.uuid4().hex[:8]}"
        self._run("createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", "wan", self.database, pw=True)

    @property
    def url(self) -> str:
        auth = f"wan:{self.password}" if self.password else "wan"
        return f"postgresql://{auth}@127.0.0.1:{self.port}/{self.database}"

    def start(self) -> None:
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1"
        self._run("pg_ctl", "-D", self.data, "-o", options, "-l", os.path.join(self.root, "log"), "-w", "start")

    def stop(self) -> None:
        self._run("pg_ctl", "-D", self.data, "-m", "fast", "-w", "stop")

    def remove(self) -> None:
        subprocess.run(self._cmd("pg_ctl", "-D", self.data, "-m", "immediate", "-w", "stop"), capture_output=True)
        shutil.rmtree(self.root, ignore_errors=True)

    def _cmd(self, tool: str, *args) -> list[str]:
        cmd = [os.path.join(self.bin, tool), *args]
        return ["runuser", "-u", "postgres", "--", *cmd] if self._as_postgres else cmd

    def _run(self, tool: str, *args, pw: bool = False) -> None:
        env = os.environ | ({"PGPASSWORD": self.password} if pw and self.password else {})
        done = subprocess.run(self._cmd(tool, *args), capture_output=True, text=True, env=env, cwd=self.root)
        if done.returncode:
            raise RuntimeError(f"{tool} failed: {done.stderr.strip() or done.stdout.strip()}")


@contextlib.contextmanager
def running(password: str | None = None):
    """A Postgres for the `with` block, removed after it whatever happened."""
    pg = Postgres(password)
    try:
        yield pg
    finally:
        pg.remove()
