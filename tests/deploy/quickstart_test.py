#!/usr/bin/python3
"""deploy/local/quickstart.sh on its failure paths: each ends with a non-zero exit code,
a line naming the step that failed and its logs, and no process of the run left behind.
(The success path runs in CI: .ci/quickstart-check.)

Usage: quickstart_test.py BIN_DIR SOURCE_DIR
Runs the quickstart with --skip-build against BIN_DIR (or a copy of it missing a
program); the daemons it starts listen on 127.0.0.1 only.
"""
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

BIN_DIR = SOURCE_DIR = ""
PROGRAMS = ["nightshift-coordinator", "nightshift-worker", "nightshift-prepare", "nightshift-trainer",
            "nightshift", "nightshift-predict"]


class QuickstartFailureTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="nightshift-quickstart-")
        self.run_dir = os.path.join(self.tmp.name, "run")

    def tearDown(self):
        subprocess.run(["pkill", "-KILL", "-f", self.run_dir])
        self.tmp.cleanup()

    def quickstart(self, *args, build_dir=None):
        """Runs the quickstart (at most 120 s); returns (exit code, stdout + stderr)."""
        env = dict(os.environ, NIGHTSHIFT_RUN_DIR=self.run_dir,
                   NIGHTSHIFT_BUILD_DIR=build_dir or os.path.dirname(BIN_DIR))
        env.pop("NIGHTSHIFT_COORDINATOR", None)
        proc = subprocess.Popen([os.path.join(SOURCE_DIR, "deploy/local/quickstart.sh"), "--skip-build", *args],
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                env=env, text=True, start_new_session=True)
        try:
            out, _ = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
            self.fail("the quickstart ran over 120 s:\n" + out)
        return proc.returncode, out

    def assert_nothing_left(self):
        time.sleep(0.5)
        left = subprocess.run(["pgrep", "-a", "-f", self.run_dir], capture_output=True, text=True).stdout
        self.assertEqual(left, "", "processes left behind")

    def test_a_program_the_build_did_not_make_is_named_before_anything_starts(self):
        build = os.path.join(self.tmp.name, "build")
        os.makedirs(os.path.join(build, "bin"))
        for p in PROGRAMS:
            if p != "nightshift-predict":
                os.symlink(os.path.join(BIN_DIR, p), os.path.join(build, "bin", p))
        rc, out = self.quickstart(build_dir=build)
        self.assertNotEqual(rc, 0, out)
        self.assertIn("FAILED at step 'build'", out)
        self.assertIn(os.path.join(build, "bin", "nightshift-predict"), out)
        self.assertIn("nightshift_program()", out)
        self.assertFalse(os.path.exists(os.path.join(self.run_dir, "coordinator.log")), "a daemon was started")
        self.assert_nothing_left()

    def test_a_coordinator_that_cannot_bind_its_port_names_the_step_and_its_log(self):
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            port = taken.getsockname()[1]
            rc, out = self.quickstart("--port", str(port), os.path.join(self.tmp.name, "spec.yaml"))
        self.assertNotEqual(rc, 0, out)
        log = os.path.join(self.run_dir, "coordinator.log")
        self.assertIn(f"FAILED at step 'start the coordinator' (exit code {rc}); logs: {log}", out)
        with open(log) as f:
            self.assertIn(f"127.0.0.1:{port}", f.read())
        self.assertNotIn("start the worker", out)
        self.assert_nothing_left()

    def test_a_job_that_fails_names_the_coordinators_the_workers_and_the_trainers_logs(self):
        spec = os.path.join(self.tmp.name, "spec.yaml")
        with open(spec, "w") as f:
            f.write("name: no-data\nmodel: {arch: transformer_classifier, layers: 1, d_model: 16, heads: 2,"
                    " ffn: 32, max_len: 32}\n"
                    f"data: {{format: text_dir, path: {self.tmp.name}/no-such-folder,"
                    " tokenizer: {type: sentencepiece, vocab_size: 100}}\n"
                    "train: {epochs: 1}\nrestart: {max_restarts: 0}\n")
        rc, out = self.quickstart(spec)
        self.assertNotEqual(rc, 0, out)
        self.assertRegex(out, r"FAILED at step 'train job [^']+' \(exit code \d+\); logs: "
                         + os.path.join(self.run_dir, "coordinator.log") + " "
                         + os.path.join(self.run_dir, "worker-local-1.log"))
        self.assertIn("no-such-folder", out)  # the job's error, from the watch or a log's tail
        self.assertNotIn("download the model", out)
        self.assert_nothing_left()


if __name__ == "__main__":
    BIN_DIR, SOURCE_DIR = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    unittest.main(argv=sys.argv[:1], verbosity=2)
