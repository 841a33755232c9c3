"""nightshift.Client against a real cluster on 127.0.0.1 (tests/python/local_cluster.py:
a coordinator and a worker with tokens and TLS): submit, a retried submit after a lost
reply stored once, wait, events, logs, metrics, artifacts, model, cancel, other users'
jobs refused, and settings found as the CLI finds them.

Usage: client_test.py BIN_DIR SOURCE_DIR
"""
import os
import sys
import tempfile
import unittest
from unittest import mock

BIN_DIR, SOURCE_DIR = (os.path.abspath(a) for a in sys.argv[1:3])
del sys.argv[1:3]
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from local_cluster import LocalCluster, TOKENS, build_package, make_text_data  # noqa: E402

TMP = tempfile.TemporaryDirectory(prefix="nightshift-pyclient-test-")
sys.path.insert(0, build_package(SOURCE_DIR, TMP.name))
import grpc  # noqa: E402
import nightshift  # noqa: E402
from nightshift import errors  # noqa: E402

DATA = make_text_data(os.path.join(TMP.name, "data", "mails"))


def spec(name, **train):
    """A job that trains in seconds on the test's mails: two epochs (two evaluations)."""
    return {"name": name,
            "model": {"arch": "transformer_classifier", "layers": 1, "d_model": 16, "heads": 2, "ffn": 32,
                      "max_len": 32},
            "data": {"format": "text_dir", "path": DATA, "tokenizer": {"vocab_size": 64}},
            "train": dict({"epochs": 2, "threads": 1, "lr": 0.005, "batching": {"batch_size": 8}}, **train)}


class LoseFirstSubmitReply(grpc.UnaryUnaryClientInterceptor):
    """Lets the first SubmitJob reach the coordinator and be handled, then drops its reply
    (the caller sees UNAVAILABLE, as when a link breaks before the answer arrives)."""

    def __init__(self):
        self.calls, self.lost_job_id = 0, None

    def intercept_unary_unary(self, continuation, details, request):
        if not details.method.endswith("/SubmitJob"):
            return continuation(details, request)
        self.calls += 1
        outcome = continuation(details, request)
        if self.calls > 1:
            return outcome
        self.lost_job_id = outcome.result().id  # handled and stored by the coordinator

        class Lost(grpc.RpcError, grpc.Call, grpc.Future):  # the failed call the caller sees
            def code(self): return grpc.StatusCode.UNAVAILABLE
            def details(self): return "reply lost (test)"
            def result(self, timeout=None): raise self
            def exception(self, timeout=None): return self
            def traceback(self, timeout=None): return None
            def add_done_callback(self, fn): fn(self)
            def cancel(self): return False
            def cancelled(self): return False
            def running(self): return False
            def done(self): return True
            def is_active(self): return False
            def time_remaining(self): return None
            def add_callback(self, callback): return False
            def initial_metadata(self): return None
            def trailing_metadata(self): return None

        return Lost()


class ClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.cluster = LocalCluster(BIN_DIR, SOURCE_DIR, os.path.join(TMP.name, "data")).__enter__()
        try:  # unittest skips tearDownClass when this raises
            cls.alice = cls.cluster.client("alice")
            cls.job = cls.alice.submit(spec("trained"))
            cls.done = cls.job.wait(progress=True, timeout=200)
        except BaseException:
            cls.cluster.stop()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.cluster.stop()

    def test_submit_then_wait_until_succeeded(self):
        self.assertRegex(self.job.id, r"^j-\d+$")
        self.assertIs(self.done, self.job)
        self.assertEqual(self.job.state, "SUCCEEDED", self.job.error + self.cluster.log("worker"))
        self.assertIn("val_accuracy", self.job.final_metrics)
        self.assertEqual(self.alice.job(self.job.id).state, "SUCCEEDED")
        states = [e.state for e in self.job.events()]
        self.assertEqual(states[0], "QUEUED")
        self.assertEqual(states[-1], "SUCCEEDED")
        self.assertIn("RUNNING", states)

    def test_a_sweep_runs_its_trials_as_jobs(self):
        definition = {"name": "lrs", "base": spec("base", epochs=1),
                      "search": {"train.lr": {"choices": [0.002, 0.02]}},
                      "method": "grid", "metric": "val_loss", "parallelism": 2}
        sweep = self.alice.sweep(definition, request_id="nb-sweep-1")
        self.assertRegex(sweep.id, r"^s-\d+$")
        # The same request id again (a retry after a lost reply): the first call's sweep.
        self.assertEqual(self.alice.sweep(definition, request_id="nb-sweep-1").id, sweep.id)
        self.assertEqual(sweep.wait(timeout=200).state, "SUCCEEDED", sweep.events())
        trials = sweep.trials()
        self.assertEqual(list(trials["train.lr"]), [0.002, 0.02])
        self.assertEqual(list(trials["state"]), ["COMPLETED", "COMPLETED"])
        best = sweep.best()
        self.assertIn(best.id, list(trials["job"]))
        self.assertEqual(best.proto.sweep_id, sweep.id)
        row = trials[trials["job"] == best.id].iloc[0]
        self.assertEqual(row["val_loss"], min(trials["val_loss"]))
        self.assertAlmostEqual(row["val_loss"], best.metrics().final["val_loss"], places=6)
        self.assertEqual([w.id for w in self.alice.sweeps()], [sweep.id])
        fig = sweep.plot()
        self.assertEqual(len(fig.axes), 2)  # the curves, and val_loss by train.lr
        self.assertEqual(len(fig.axes[0].lines), 2)

    def test_a_retried_submit_after_a_lost_reply_is_stored_once(self):
        lose = LoseFirstSubmitReply()
        client = self.cluster.client("alice", interceptors=[lose])
        before = {j.id for j in self.alice.jobs()}
        job = client.submit(spec("retried", max_steps=1, epochs=1))
        self.assertEqual(lose.calls, 2)
        self.assertEqual(job.id, lose.lost_job_id)
        after = [j for j in self.alice.jobs() if j.id not in before]
        self.assertEqual([j.id for j in after], [job.id])
        self.assertEqual(self.alice.cancel(job.id).id, job.id)
        # An id given by the caller: the second submit is the first's job, not a new one.
        first = self.alice.submit(spec("mine", max_steps=1, epochs=1), request_id="nb-retry-1")
        again = self.alice.submit(spec("mine", max_steps=1, epochs=1), request_id="nb-retry-1")
        self.assertEqual(first.id, again.id)
        self.alice.cancel(first.id)

    def test_logs_are_the_trainers(self):
        lines = list(self.job.logs())
        self.assertTrue(lines)
        self.assertTrue(any("trainer" in line for line in lines), lines[-5:])
        self.assertEqual(lines, list(self.job.logs(follow=True)))  # a finished rank: follow ends

    def test_metrics_per_epoch(self):
        m = self.job.metrics()
        epochs = [e.epoch for e in m.evaluations]
        self.assertEqual(len(epochs), 2)  # one per epoch
        self.assertLess(epochs[0], epochs[1])
        self.assertLess(m.evaluations[0].step, m.evaluations[1].step)
        self.assertIn("val_accuracy", m.final)
        self.assertAlmostEqual(m.final["val_accuracy"], self.job.final_metrics["val_accuracy"], places=6)
        self.assertTrue(m.train and all(p.step > 0 for p in m.train))
        df = m.to_dataframe()
        self.assertEqual(list(df["epoch"]), epochs)
        self.assertIn("val_accuracy", df.columns)
        self.assertIn("EPOCH", str(m))
        import matplotlib
        matplotlib.use("Agg")
        fig = self.job.plot()
        self.assertEqual(len(fig.axes), 2)
        self.assertTrue(fig.axes[0].get_lines())

    def test_artifacts_are_verified_and_kept_once(self):
        dest = os.path.join(TMP.name, "artifacts", "model")
        self.assertEqual(self.job.artifacts(dest), dest)
        files = sorted(os.listdir(dest))
        self.assertIn("checksums.json", files)
        self.assertIn("model.safetensors", files)
        nightshift.verify_folder(dest)
        with self.assertRaisesRegex(errors.SettingsError, "already exists"):
            self.job.artifacts(dest)
        self.assertEqual(os.listdir(os.path.dirname(dest)), ["model"])  # no partial folder left
        model = self.job.model(os.path.join(TMP.name, "artifacts", "again"))
        self.assertEqual(sorted(model.labels), ["ham", "spam"])
        self.assertEqual(len(model.predict(["free cash prize click", "team meeting agenda"])), 2)

    def test_cancel_stops_a_running_job(self):
        job = self.alice.submit(spec("long", epochs=1000))
        for seen in job.watch(timeout=120):
            if seen.state == "RUNNING":
                break
        self.assertEqual(job.state, "RUNNING")
        self.alice.cancel(job.id, reason="test")
        self.assertEqual(job.wait(progress=False, timeout=60).state, "CANCELLED")
        with self.assertRaises(errors.FailedPrecondition) as e:
            job.artifacts(os.path.join(TMP.name, "none"))
        self.assertEqual(e.exception.code, grpc.StatusCode.FAILED_PRECONDITION)
        self.assertFalse(os.path.exists(os.path.join(TMP.name, "none")))

    def test_another_users_job_is_refused(self):
        bob = self.cluster.client("bob")
        with self.assertRaises(errors.PermissionDenied) as e:
            bob.job(self.job.id)
        self.assertEqual(e.exception.code, grpc.StatusCode.PERMISSION_DENIED)
        self.assertTrue(e.exception.message)
        self.assertIn(f"PERMISSION_DENIED: {e.exception.message}", str(e.exception))
        with self.assertRaises(errors.PermissionDenied):
            bob.cancel(self.job.id)
        with self.assertRaises(errors.PermissionDenied):
            list(bob.job  # the stream calls too
                 if False else nightshift.Job(bob, self.job.proto).logs())
        self.assertNotIn(self.job.id, [j.id for j in bob.jobs()])
        with self.assertRaises(errors.PermissionDenied):
            self.alice.workers()  # an admin call

    def test_errors_by_kind(self):
        with self.assertRaises(errors.Unauthenticated) as e:
            self.cluster.client("alice", token="").jobs() if False else nightshift.Client(
                self.cluster.address, "", self.cluster.cert("ca.crt")).jobs()
        self.assertIsInstance(e.exception, errors.PermissionDenied)
        with self.assertRaises(errors.NotFound):
            self.alice.job("j-999999")
        bad = spec("bad")
        bad["model"]["arch"] = "no_such_arch"
        with self.assertRaises(errors.SpecRefused) as e:
            self.alice.submit(bad)
        self.assertIn("model.arch", str(e.exception))
        with self.assertRaisesRegex(errors.SettingsError, "state: unknown state DONE"):
            self.alice.jobs(state="DONE")
        with self.assertRaisesRegex(errors.SettingsError, "cannot read spec file /no/such.yaml"):
            self.alice.submit("/no/such.yaml")
        admin = self.cluster.client("admin")
        self.assertEqual([(w.name, w.state) for w in admin.workers()], [("local-1", "WORKER_READY")])
        # Plaintext to a TLS port, or the wrong CA: nobody answers (not retried outside submit).
        with self.assertRaises(errors.Unavailable):
            nightshift.Client(self.cluster.address, TOKENS["alice"][0], "").jobs()

    def test_settings_as_the_cli_finds_them(self):
        home = os.path.join(TMP.name, "home")
        os.makedirs(os.path.join(home, ".config", "nightshift"), exist_ok=True)
        with open(os.path.join(home, ".config", "nightshift", "alice.token"), "w") as f:
            f.write(TOKENS["alice"][0] + "\n")
        with open(os.path.join(home, ".config", "nightshift", "config.yaml"), "w") as f:
            f.write(f"coordinator: {self.cluster.address}\ntoken_file: alice.token\n"
                    f"tls_ca: {self.cluster.cert('ca.crt')}\n")
        clean = {k: v for k, v in os.environ.items() if not k.startswith(("NIGHTSHIFT_", "XDG_CONFIG_HOME"))}
        with mock.patch.dict(os.environ, dict(clean, HOME=home), clear=True):
            self.assertIn(self.job.id, [j.id for j in nightshift.Client().jobs()])  # the file's token: alice's
            os.environ["NIGHTSHIFT_TOKEN"] = TOKENS["bob"][0]  # the environment's token wins over the file's
            self.assertNotIn(self.job.id, [j.id for j in nightshift.Client().jobs()])
            self.assertIn(self.job.id, [j.id for j in nightshift.Client(token=TOKENS["alice"][0]).jobs()])
            os.environ["NIGHTSHIFT_COORDINATOR"] = "127.0.0.1:1"  # the environment's address wins too
            self.assertEqual(nightshift.Client().settings.coordinator, "127.0.0.1:1")
        with mock.patch.dict(os.environ, dict(clean, **self.cluster.env("alice")), clear=True):
            client = nightshift.Client()  # NIGHTSHIFT_CONFIG's tls_ca, relative to its folder
            self.assertEqual(client.settings.tls_ca, self.cluster.cert("ca.crt"))
            self.assertIn(self.job.id, [j.id for j in client.jobs()])
            with open(self.cluster.config_file(), "a") as f:
                f.write("colour: blue\n")
            with self.assertRaisesRegex(errors.SettingsError, r'line 2: unknown key "colour"'):
                nightshift.Client()


class DownloadTest(unittest.TestCase):
    """nightshift.download on streams made here: what `job artifacts` refuses, refused."""

    def chunks(self, files, order=None):
        import hashlib
        import json
        from nightshift.v1 import jobs_pb2
        sums = {"algorithm": "sha256", "files": {n: {"bytes": len(d), "sha256": hashlib.sha256(d).hexdigest()}
                                                 for n, d in files.items()}}
        out = [jobs_pb2.ArtifactChunk(checksums_json=json.dumps(sums), step=7)]
        for name, data in files.items():
            out += [jobs_pb2.ArtifactChunk(file=name, offset=o, data=data[o:o + 3]) for o in range(0, len(data), 3)]
        return out

    def receive(self, chunks):
        from nightshift import download
        folder = tempfile.mkdtemp(dir=TMP.name)
        checksums_json, step = download.receive(chunks, folder)
        with open(os.path.join(folder, "checksums.json"), "w") as f:
            f.write(checksums_json)
        download.verify(folder)
        return folder, step

    def test_a_whole_stream_verifies(self):
        folder, step = self.receive(self.chunks({"a.bin": b"0123456789", "empty": b""}))
        self.assertEqual(step, 7)
        with open(os.path.join(folder, "a.bin"), "rb") as f:
            self.assertEqual(f.read(), b"0123456789")
        self.assertEqual(os.path.getsize(os.path.join(folder, "empty")), 0)

    def test_what_does_not_match_is_refused(self):
        chunks = self.chunks({"a.bin": b"0123456789"})
        chunks[2].data = b"XYZ"
        with self.assertRaisesRegex(errors.DownloadCorrupt, "a.bin: sha256 .*, checksums.json says"):
            self.receive(chunks)
        chunks = self.chunks({"a.bin": b"0123456789"})
        with self.assertRaisesRegex(errors.DownloadCorrupt, "a.bin: a chunk out of order"):
            self.receive([chunks[0], chunks[2], chunks[1]])
        with self.assertRaisesRegex(errors.DownloadCorrupt, "a.bin: missing|a.bin: 0 bytes"):
            self.receive(chunks[:1])
        chunks[1].file = "../evil"
        with self.assertRaisesRegex(errors.DownloadCorrupt, "sent '../evil', not in checksums.json"):
            self.receive(chunks)
        chunks[0].checksums_json = '{"algorithm": "md5", "files": {}}'
        with self.assertRaisesRegex(errors.DownloadCorrupt, 'algorithm "md5" is neither'):
            self.receive(chunks)
        # Names a folder join could take out of it elsewhere (a drive, "D:x" on Windows) or
        # that no file has (control characters), listed in checksums.json itself.
        for name in ("D:x", "a\x01b", "a" * 256):
            with self.assertRaisesRegex(errors.DownloadCorrupt, "is not a plain file name"):
                self.receive(self.chunks({name: b"0123456789"}))


class SweepFileTest(unittest.TestCase):
    """nightshift.sweeps.sweep_yaml: the file's text as the CLI sends it, errors naming the file."""

    def test_a_base_file_goes_as_written_and_bad_files_are_named(self):
        from nightshift.sweeps import sweep_yaml
        folder = tempfile.mkdtemp(dir=TMP.name)
        with open(os.path.join(folder, "job.yaml"), "w") as f:
            f.write("name: octal\ntrain: {seed: 010, batching: {max_tokens: auto}}\ndata: {path: /d, text_field: yes}\n")
        sweep = os.path.join(folder, "sweep.yaml")
        with open(sweep, "w") as f:
            f.write("base: job.yaml\nsearch: {train.lr: {choices: [0.1]}}\nmethod: grid\nmetric: val_loss\n")
        text, path = sweep_yaml(sweep)
        self.assertEqual(path, sweep)
        # Not PyYAML's YAML 1.1 values (8, True), which the CLI never sends.
        self.assertIn("seed: 010", text)
        self.assertIn("text_field: yes", text)
        self.assertIn("max_tokens: auto", text)
        with self.assertRaisesRegex(errors.SettingsError, "cannot read sweep file .*/no-such.yaml"):
            sweep_yaml(os.path.join(folder, "no-such.yaml"))
        with open(sweep, "w") as f:
            f.write("search: [unclosed\n")
        with self.assertRaisesRegex(errors.SettingsError, "sweep.yaml: not YAML"):
            sweep_yaml(sweep)


class MetricsTest(unittest.TestCase):
    def test_each_evaluation_gets_the_training_loss_at_its_step(self):
        from nightshift.v1 import jobs_pb2
        proto = jobs_pb2.JobMetrics(job_id="j-1", attempts=[jobs_pb2.AttemptMetrics(
            attempt=0, stride=1,
            train=[jobs_pb2.TrainPoint(step=s, epoch=1 + (s > 2), loss=1.0 / s) for s in (1, 2, 3, 4)],
            evals=[jobs_pb2.EvalPoint(step=2, epoch=1, metrics={"val_accuracy": 0.5, "val_loss": 0.9}),
                   jobs_pb2.EvalPoint(step=4, epoch=2, metrics={"val_accuracy": 0.75, "val_loss": 0.6})])])
        m = nightshift.Metrics(proto)
        self.assertEqual([(e.epoch, e.step, e.loss) for e in m.evaluations], [(1, 2, 0.5), (2, 4, 0.25)])
        self.assertEqual(m.final, {"val_accuracy": 0.75, "val_loss": 0.6})
        self.assertEqual(list(m.to_dataframe().columns), ["attempt", "epoch", "step", "loss", "val_accuracy", "val_loss"])
        self.assertEqual(len(m.train_dataframe()), 4)
        self.assertEqual(str(m).splitlines()[1].split(), ["1", "2", "0.5000", "0.5000", "0.9000"])
        self.assertEqual(str(nightshift.Metrics(jobs_pb2.JobMetrics())),
                         "no metrics yet: the job has not reported a step")


if __name__ == "__main__":
    unittest.main(verbosity=2)
