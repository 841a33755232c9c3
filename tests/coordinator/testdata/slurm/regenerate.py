#!/usr/bin/env python3
"""Regenerates the Slurm 22.05 fixtures in this folder from a real cluster.

Needs root plus Debian 12's slurm-wlm and munge; starts a throwaway cluster
with tests/support/slurm_cluster.py (2 nodes x 2 CPUs, partitions low/high)
and tears it down. Takes about a minute. Usage:

    python3 tests/coordinator/testdata/slurm/regenerate.py [OUTDIR]
    python3 tests/coordinator/testdata/slurm/regenerate.py --sacct [OUTDIR]

Writes the fixtures plus notes.json (state timelines, error outputs). With --sacct,
only the sacct-22.05-*.json fixtures, from a cluster with accounting (MariaDB and
slurmdbd too: Debian's mariadb-server and slurmdbd; about two minutes, a job's time
limit among them).
"""

import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "support"))
from slurm_cluster import SlurmCluster  # noqa: E402

SACCT_ONLY = "--sacct" in sys.argv[1:]
ARGS = [a for a in sys.argv[1:] if a != "--sacct"]
OUT = ARGS[0] if ARGS else HERE
NOTES: dict = {}
TERMINAL = {"COMPLETED", "FAILED", "CANCELLED", "PREEMPTED", "TIMEOUT", "NODE_FAIL",
            "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE"}


def sacct_fixtures() -> int:
    """sacct --json of one job per way an allocation ends, each once its record is
    whole: slurmctld sends the job's records to slurmdbd a moment after it ends, and
    until its start record is in, sacct shows the end under the name "allocation",
    with no partition and exit code 0 (a failed job's too)."""
    with SlurmCluster(nodes=2, cpus_per_node=2, min_job_age=300, accounting=True) as c:
        jobs = os.path.join(c.state["dir"], "jobs")
        t0 = time.monotonic()

        def sbatch(name, *args):
            r = c.run(["sbatch", "--parsable", f"--output={jobs}/%j.out",
                       f"--job-name=nightshift-j-acct-{name}", *args], cwd=jobs)
            return r.stdout.strip()

        def sacct(job):
            return c.run(["sacct", "--json", f"--jobs={job}"]).stdout

        def ended(job, timeout=150):
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                text = sacct(job)
                last = (json.loads(text)["jobs"] or [{}])[-1]
                if last.get("state", {}).get("current") in TERMINAL and \
                        last["name"].startswith("nightshift-j-acct-") and last["partition"]:
                    return text
                time.sleep(0.5)
            raise RuntimeError(f"job {job} has no terminal record in sacct")

        def running(job):
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                if any(j["job_id"] == int(job) and j["job_state"] == "RUNNING"
                       for j in json.loads(c.run(["squeue", "--json", "--all"]).stdout)["jobs"]):
                    return
                time.sleep(0.3)
            raise RuntimeError(f"job {job} never ran")

        def save(name, text):
            with open(os.path.join(OUT, name), "w") as f:
                f.write(text if text.endswith("\n") else text + "\n")

        one = ["--nodes=1", "--ntasks-per-node=1", "--no-requeue"]
        limit = sbatch("a0", *one, "--time=1", "--wrap", "srun sleep 300")
        ok = sbatch("a1", *one, "--wrap", "srun --kill-on-bad-exit=1 hostname")
        bad = sbatch("a2", *one, "--wrap", "srun --kill-on-bad-exit=1 sh -c 'exit 7'")
        cancel = sbatch("a3", *one, "--wrap", "srun sleep 300")
        running(cancel)
        c.run(["scancel", cancel])
        save("sacct-22.05-completed.json", ended(ok))
        save("sacct-22.05-failed.json", ended(bad))
        save("sacct-22.05-cancelled.json", ended(cancel))
        save("sacct-22.05-timeout.json", ended(limit))
        low = sbatch("a4", "--partition=low", "--nodes=2", "--exclusive", "--no-requeue",
                     "--time=5", "--wrap", "srun sleep 300")
        running(low)
        high = sbatch("high", "--partition=high", "--nodes=2", "--ntasks-per-node=1",
                      "--time=5", "--wrap", "srun sleep 300")
        save("sacct-22.05-preempted.json", ended(low))
        c.run(["scancel", high])
        r = c.run(["sacct", "--json", "--jobs=999999"], check=False)
        save("sacct-22.05-unknown.json", r.stdout)
        r = c.run(["sacct", "-P", "-o", "JobID,JobName,State,ExitCode,DerivedExitCode,NodeList",
                   f"--jobs={ok},{bad},{cancel},{limit},{low}"], check=False)
        save("sacct-22.05-text.txt", r.stdout)
    print("sacct fixtures written to", OUT, f"in {time.monotonic() - t0:.1f}s")
    return 0


def main() -> int:
    with SlurmCluster(nodes=2, cpus_per_node=2, min_job_age=300) as c:
        jobs = os.path.join(c.state["dir"], "jobs")

        def run(argv, check=True):
            return c.run(argv, check=check, cwd=jobs)

        def squeue():
            r = run(["squeue", "--json", "--all"])
            return r.stdout

        def jobs_by_id():
            return {j["job_id"]: j for j in json.loads(squeue())["jobs"]}

        def save(name, text):
            assert len(text) < 200_000, (name, len(text))
            with open(os.path.join(OUT, name), "w") as f:
                f.write(text if text.endswith("\n") else text + "\n")

        def wait(job_id, pred, timeout=60, what=""):
            deadline = time.monotonic() + timeout
            seen = []
            while time.monotonic() < deadline:
                j = jobs_by_id().get(job_id)
                st = (j["job_state"], j["state_reason"]) if j else ("<absent>", "")
                if not seen or seen[-1][1:] != st:
                    seen.append((round(time.monotonic() - t0, 1),) + st)
                if j and pred(j):
                    return j, seen
                time.sleep(0.3)
            raise RuntimeError(f"timeout waiting for {job_id} {what}: {seen}")

        def sbatch(*args):
            r = run(["sbatch", "--parsable", f"--output={jobs}/%j.out", *args])
            return r.stdout

        t0 = time.monotonic()
        save("squeue-22.05-empty.json", squeue())

        script = os.path.join(jobs, "nightshift.sh")
        with open(script, "w") as f:
            f.write("#!/bin/sh\nsrun --kill-on-bad-exit=1 sleep 30\n")
        ns_args = ["--nodes=2", "--ntasks-per-node=1",
                   "--job-name=nightshift-j-abc-a0", "--no-requeue",
                   "--signal=B:TERM@30", "--time=5"]
        out = sbatch(*ns_args, script)
        NOTES["sbatch_parsable_stdout"] = out
        save("sbatch-22.05-parsable.txt", out)
        a = int(out.strip())
        wait(a, lambda j: j["job_state"] == "RUNNING")
        save("squeue-22.05-running.json", squeue())

        held = int(sbatch("--hold", "--nodes=2", "--ntasks-per-node=1",
                          "--job-name=nightshift-j-abc-held", "--wrap", "true"))
        big = int(sbatch("--nodes=2", "--ntasks-per-node=2",
                         "--job-name=nightshift-j-abc-big", "--wrap", "true"))
        wait(big, lambda j: j["state_reason"] == "Resources")
        save("squeue-22.05-pending.json", squeue())
        run(["scancel", str(held), str(big)])

        # Terminal states: cancelled (running), completed, failed (exit 3).
        run(["scancel", str(a)])
        _, NOTES["timeline_cancelled"] = wait(
            a, lambda j: j["job_state"] == "CANCELLED")
        ok = int(sbatch("--nodes=2", "--ntasks-per-node=1",
                        "--job-name=nightshift-j-abc-ok", "--wrap",
                        "srun --kill-on-bad-exit=1 hostname"))
        bad = int(sbatch("--nodes=2", "--ntasks-per-node=1",
                         "--job-name=nightshift-j-abc-fail", "--wrap", "exit 3"))
        sbad = int(sbatch("--nodes=2", "--ntasks-per-node=1",
                          "--job-name=nightshift-j-abc-srunfail", "--wrap",
                          "srun --kill-on-bad-exit=1 sh -c 'exit 7'"))
        _, NOTES["timeline_completed"] = wait(
            ok, lambda j: j["job_state"] == "COMPLETED")
        _, NOTES["timeline_failed"] = wait(bad, lambda j: j["job_state"] == "FAILED")
        wait(sbad, lambda j: j["job_state"] == "FAILED")
        save("squeue-22.05-finished.json", squeue())

        # Preemption: low-tier job holds every CPU; a high-tier job arrives.
        for requeue in (True, False):
            low = int(sbatch("--partition=low", "--nodes=2", "--exclusive",
                             "--requeue" if requeue else "--no-requeue",
                             f"--job-name=nightshift-j-low-{'rq' if requeue else 'norq'}",
                             "--time=5", "--wrap", "srun sleep 300"))
            wait(low, lambda j: j["job_state"] == "RUNNING")
            hi = int(sbatch("--partition=high", *ns_args[:2],
                            f"--job-name=nightshift-j-high-{'rq' if requeue else 'norq'}",
                            "--time=5", "--wrap", "srun sleep 300"))
            tag = "requeue" if requeue else "norequeue"
            j, tl = wait(hi, lambda j: j["job_state"] == "RUNNING", timeout=90)
            time.sleep(1)
            _, tl_low = wait(low, lambda j: j["job_state"] != "RUNNING", 30)
            time.sleep(2)
            NOTES[f"timeline_preempt_{tag}_low"] = tl_low
            save(f"squeue-22.05-preempted-{tag}.json", squeue())
            run(["scancel", str(low), str(hi)])
            wait(low, lambda j: j["job_state"] not in ("RUNNING", "PENDING",
                                                       "COMPLETING"))
            wait(hi, lambda j: j["job_state"] not in ("RUNNING", "COMPLETING"))

        # Filters and unknown ids.
        r = run(["squeue", "--json", "--jobs=999999"], check=False)
        NOTES["squeue_json_unknown_job"] = {
            "rc": r.returncode, "stderr": r.stderr,
            "job_ids_returned": [j["job_id"] for j in json.loads(r.stdout)["jobs"]]}
        r = run(["squeue", "--jobs=999999"], check=False)
        NOTES["squeue_plain_unknown_job"] = {"rc": r.returncode,
                                             "stdout": r.stdout, "stderr": r.stderr}
        r = run(["squeue", "--json", f"--jobs={ok}"], check=False)
        NOTES["squeue_json_jobs_filter_returns"] = [
            j["job_id"] for j in json.loads(r.stdout)["jobs"]]
        r = run(["sacct", "--json"], check=False)
        NOTES["sacct_json"] = {"rc": r.returncode, "stdout": r.stdout[:300],
                               "stderr": r.stderr}
        r = run(["sacct", "-c", "-P", "-o",
                 "jobid,jobname,partition,state,exitcode,nodelist,start,end"],
                check=False)
        NOTES["sacct_completion_filetxt"] = {"rc": r.returncode, "stdout": r.stdout,
                                             "stderr": r.stderr}
        r = run(["scontrol", "show", "job", "-o", str(bad)], check=False)
        NOTES["scontrol_show_job_failed"] = r.stdout
        with open(os.path.join(OUT, "notes-22.05.json"), "w") as f:
            json.dump(NOTES, f, indent=1)
            f.write("\n")
    print("fixtures written to", OUT, f"in {time.monotonic() - t0:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(sacct_fixtures() if SACCT_ONLY else main())
