"""examples/python-client.ipynb, executed headless (nbclient) against a real local cluster
(tests/python/local_cluster.py, tokens and TLS) in its quick mode: every cell runs, the plot
cell shows an image, the metrics and sweep cells show tables, and two mails are classified.

Usage: notebook_test.py BIN_DIR SOURCE_DIR [EXECUTED.ipynb]  (the corpus in SOURCE_DIR/data)
"""
import os
import re
import sys
import tempfile
import unittest

BIN_DIR, SOURCE_DIR = (os.path.abspath(a) for a in sys.argv[1:3])
SAVE_TO = sys.argv[3] if len(sys.argv) > 3 else None
del sys.argv[1:]
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from local_cluster import LocalCluster, build_package  # noqa: E402

NOTEBOOK = os.path.join(SOURCE_DIR, "examples", "python-client.ipynb")
CORPUS = os.path.join(SOURCE_DIR, "data", "spamassassin")


def tagged(nb, tag):
    """The one cell with this tag."""
    cells = [c for c in nb.cells if tag in c.metadata.get("tags", [])]
    assert len(cells) == 1, f"{len(cells)} cells tagged {tag}"
    return cells[0]


def output_data(cell, mime):
    """Every output of the cell with this MIME type."""
    return [o["data"][mime] for o in cell.outputs if mime in o.get("data", {})]


class NotebookTest(unittest.TestCase):
    def test_the_example_notebook_runs_and_shows_its_plot_and_tables(self):
        import nbclient
        import nbformat

        self.assertTrue(os.path.isdir(os.path.join(CORPUS, "ham")), f"no corpus in {CORPUS}: scripts/fetch-data.sh")
        with tempfile.TemporaryDirectory(prefix="nightshift-notebook-test-") as tmp:
            site = build_package(SOURCE_DIR, tmp)
            sys.path.insert(0, site)  # this process's client, as the kernel's (PYTHONPATH)
            with LocalCluster(BIN_DIR, SOURCE_DIR, os.path.join(SOURCE_DIR, "data")) as cluster:
                env = dict(cluster.env("alice"), PYTHONPATH=site, NIGHTSHIFT_EXAMPLE_QUICK="1",
                           NIGHTSHIFT_EXAMPLE_DATA=CORPUS, MPLBACKEND="module://matplotlib_inline.backend_inline")
                saved = {k: os.environ.get(k) for k in env}
                os.environ.update(env)  # the kernel inherits this process's environment
                try:
                    nb = nbformat.read(NOTEBOOK, as_version=4)
                    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                                            resources={"metadata": {"path": os.path.dirname(NOTEBOOK)}}).execute()
                finally:
                    for k, v in saved.items():
                        if v is None:
                            os.environ.pop(k, None)
                        else:
                            os.environ[k] = v
                if SAVE_TO:
                    nbformat.write(nb, SAVE_TO)
                jobs = [j.id for j in cluster.client("admin").jobs(state="SUCCEEDED")]
        self.assertEqual(len(jobs), 4, jobs)  # the demo job and the sweep's three
        self.assertTrue(output_data(tagged(nb, "plot"), "image/png"), "the plot cell shows no image")
        metrics = "".join(output_data(tagged(nb, "metrics-table"), "text/html"))
        self.assertEqual(metrics.split("<tbody>")[-1].count("<tr"), 3, metrics)  # one row per epoch
        self.assertIn("val_accuracy", metrics)
        sweep = "".join(output_data(tagged(nb, "sweep-table"), "text/html"))
        for job in jobs[1:]:
            self.assertIn(job, sweep)
        self.assertIn("val_accuracy", sweep)
        self.assertEqual(sweep.count("SUCCEEDED"), 3, sweep)
        self.assertEqual(sweep.split("<tbody>")[-1].count("<tr"), 3, sweep)  # one row per job
        printed = "".join(o.get("text", "") for o in tagged(nb, "classify").outputs)
        self.assertEqual(len(re.findall(r"^(ham|spam)/\S+ -> (ham|spam) \(\d\.\d\d\)$", printed, re.M)), 2, printed)


if __name__ == "__main__":
    unittest.main(verbosity=2)
