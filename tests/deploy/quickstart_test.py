#!/usr/bin/python3
"""deploy/local/quickstart.sh on its failure paths: each ends with a non-zero exit code,
a line naming the step that failed and its logs, and no process of the run left behind.
(The success path runs in CI: .ci/quickstart-check.)

Usage: quickstart_test.py BIN_DIR SOURCE_DIR
Runs the quickstart with --skip-build against BIN_DIR (or a copy of it missing a
program); the daemons it starts listen on 127.0.0.1 only.
"""
import glob
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
        # The worker's data root, apart from its run dir (a worker refuses a data root that
        # holds its own folders).
        self.data_root = os.path.join(self.tmp.name, "data")
        os.makedirs(self.data_root)
        self.session = 0  # the quickstart's session: everything it starts is in it

    def tearDown(self):
        subprocess.run(["pkill", "-KILL", "-f", self.run_dir])
        if self.session:
            subprocess.run(["pkill", "-KILL", "-s", str(self.session)])
        self.tmp.cleanup()

    def quickstart(self, *args, build_dir=None, meanwhile=None):
        """Runs the quickstart (at most 120 s), calling meanwhile() once it started;
        returns (exit code, stdout + stderr)."""
        env = dict(os.environ, NIGHTSHIFT_RUN_DIR=self.run_dir,
                   NIGHTSHIFT_BUILD_DIR=build_dir or os.path.dirname(BIN_DIR),
                   NIGHTSHIFT_DATA_ROOT=self.data_root)  # the worker reads the tests' data here
        env.pop("NIGHTSHIFT_COORDINATOR", None)
        proc = subprocess.Popen([os.path.join(SOURCE_DIR, "deploy/local/quickstart.sh"), "--skip-build", *args],
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                env=env, text=True, start_new_session=True)
        self.session = proc.pid
        if meanwhile:
            meanwhile()
        try:
            out, _ = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
            self.fail("the quickstart ran over 120 s:\n" + out)
        return proc.returncode, out

    def assert_nothing_left(self):
        """No process of the run is still alive, waiting up to 5 s for the last to exit. A
        zombie (<defunct>: exited, its parent gone, not yet reaped by init) is not alive."""
        left = ""
        for _ in range(50):
            time.sleep(0.1)
            left = "".join(line + "\n" for match in (["-s", str(self.session)], ["-f", self.run_dir])
                           for line in subprocess.run(["pgrep", "-a", *match], capture_output=True,
                                                      text=True).stdout.splitlines()
                           if not line.endswith("<defunct>"))
            if not left:
                return
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

    def write_spec(self, data_path, max_steps=10):
        spec = os.path.join(self.tmp.name, "spec.yaml")
        with open(spec, "w") as f:
            f.write("name: quickstart-test\nmodel: {arch: transformer_classifier, layers: 1, d_model: 16, heads: 2,"
                    " ffn: 32, max_len: 32}\n"
                    f"data: {{format: text_dir, path: {data_path}, tokenizer: {{type: sentencepiece, vocab_size: 40}}}}\n"
                    f"train: {{epochs: 100000, max_steps: {max_steps}, batching: {{batch_size: 4}}, threads: 1}}\n"
                    "restart: {max_restarts: 0}\n")
        return spec

    def test_a_worker_that_dies_while_the_job_trains_fails_the_step_with_its_exit_code(self):
        data = os.path.join(self.tmp.name, "data")
        for label, word in (("ham", "meeting"), ("spam", "winner")):
            os.makedirs(os.path.join(data, label))
            for i in range(20):
                with open(os.path.join(data, label, f"{i}.txt"), "w") as f:
                    f.write(" ".join([word, "the", "and", "today", str(i)] * (1 + i % 5)))

        def kill_the_worker_once_a_rank_runs():
            for _ in range(600):
                logs = glob.glob(os.path.join(self.run_dir, "worker-local-1/jobs/*/attempt-0/rank-0.log"))
                if logs and os.path.getsize(logs[0]) > 0:
                    break
                time.sleep(0.1)
            worker = subprocess.run(["pgrep", "-f", "nightshift-worker .*" + self.run_dir],
                                    capture_output=True, text=True).stdout.split()
            self.assertEqual(len(worker), 1, "no worker, or no rank started in 60 s")
            os.kill(int(worker[0]), signal.SIGKILL)

        rc, out = self.quickstart(self.write_spec(data, max_steps=10**9), meanwhile=kill_the_worker_once_a_rank_runs)
        self.assertEqual(rc, 137, out)
        self.assertRegex(out, r"FAILED at step 'train job j-\d+: the worker exited' \(exit code 137\); logs: "
                         + os.path.join(self.run_dir, "worker-local-1.log"))
        self.assert_nothing_left()  # the rank died with its worker; the coordinator and the watch were stopped

    def test_a_job_that_fails_names_the_coordinators_the_workers_and_the_trainers_logs(self):
        rc, out = self.quickstart(self.write_spec(os.path.join(self.data_root, "no-such-folder")))
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
