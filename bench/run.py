"""``make bench`` (``python -m bench``): the runner. It reads the command line, runs the sections asked for,
and writes what they measured; it asserts nothing about time and never fails CI.

Plain ``make bench`` runs, in this order: the load paths (load_paths.py), verification (verification.py),
the lab run and a parallel backfill (lab_run.py), with ``--downloads`` the GBIF download section
(downloads.py), with ``--distributed`` the distributed profile (distributed_run.py), and the whole pipeline
at size (at_size.py: gbif_derived, masked_release, region_assignment and the whole make run, each against
its limit). ``--only-<section>`` runs one section alone.

Each section overwrites its one answer, bench/results/<section>.md and .json (bench/shared/report.py);
plain ``make bench`` also writes bench/results.md and results.json: the at-size scorecard first, then every
section it measured. Everything runs in scratch databases (created here, dropped at the end) and temporary
folders, so the lab warehouse, its Dagster storage and ``data/`` are never touched; generated downloads are
cached in bench/out/ (gitignored).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import lab_run, load_paths, verification
from bench.shared.report import machine, write_results, write_section
from surveillance_pipeline.core.settings import DATABASE_URL_VARIABLE, PROJECT_ROOT
from surveillance_pipeline_tests.support.scratch_databases import scratch_database

# What --only-distributed (and --distributed) runs by default: the profile's targets are stated for the
# download's import with 1 and 2 workers, the lab run against local, and a dead worker's cost.
DISTRIBUTED_PARTS = "download,lab,kills"
# The whole pipeline at size: every asset against its limit and the whole run, at these records.
AT_SIZE_SIZES = (1_000_000, 5_000_000)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="make bench: the project's paths next to the limits")
    parser.add_argument("--reps", type=int, default=3, help="repetitions per path (the median is kept)")
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--with-10m", action="store_true", help="also 10,000,000 rows")
    parser.add_argument("--no-lab-run", action="store_true", help="leave out the lab run section")
    parser.add_argument("--no-parallel", action="store_true", help="leave out the parallel backfill")
    parser.add_argument(
        "--verify-sizes",
        type=lambda text: [int(size) for size in text.split(",") if size.strip()],
        default=[1_000_000, 5_000_000],
        help="rows of the verification section, comma-separated (empty: leave it out)",
    )
    parser.add_argument("--parallel-species", type=int, default=4)
    parser.add_argument("--parallel-rows", type=int, default=100_000)
    parser.add_argument("--parallel-reps", type=int, default=2)
    # The md5 cap's statement swings by a third from one run to the next on a shared machine (2.3–3.8 s
    # seen), more than the project adds to it; more pairs steady the median.
    parser.add_argument("--sample-reps", type=int, default=5, help="alternating pairs for the md5 cap")
    parser.add_argument(
        "--limit-max-rows",
        type=int,
        default=1_000_000,
        help="run the \\copy limit only up to this size (into an indexed table it grows superlinearly)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=PROJECT_ROOT / "bench",
        help="where results.md, results.json and results/<section>.md|json go (default bench/)",
    )
    parser.add_argument(
        "--downloads", action="store_true", help="also the GBIF download section (bench/downloads.py)"
    )
    parser.add_argument(
        "--only-downloads", action="store_true", help="only the GBIF download section: results/downloads.md"
    )
    parser.add_argument(
        "--only-masking", action="store_true", help="only masked_release vs its limit: results/masking.md"
    )
    parser.add_argument(
        "--masking-sizes",
        type=lambda text: [int(size) for size in text.split(",") if size.strip()],
        default=[1_000_000, 5_000_000],
        help="rows of the one bench species in the masking section, comma-separated",
    )
    parser.add_argument(
        "--download-sizes",
        type=lambda text: [int(size) for size in text.split(",") if size.strip()],
        default=[1_000_000, 5_000_000],
        help="records per generated download, comma-separated (default 1000000,5000000)",
    )
    parser.add_argument(
        "--distributed",
        action="store_true",
        help=f"also the distributed profile's parts {DISTRIBUTED_PARTS} (see --only-distributed)",
    )
    parser.add_argument(
        "--only-distributed",
        "--only-distributed-run",
        dest="only_distributed",
        nargs="?",
        const=DISTRIBUTED_PARTS,
        help="only the distributed profile; parts, comma-separated (default "
        f"{DISTRIBUTED_PARTS}): download = make run's import of a 600,000-record download, 1 worker vs 2, "
        "side by side; lab = the lab make run, 2 workers vs local; kills = a dead worker's cost "
        "(bench/distributed_run.py, results/distributed_run.md); backfill = a backfill's speed-up and the "
        "profile's cost per partition (bench/distributed.py, results/distributed.md)",
    )
    parser.add_argument(
        "--distributed-reps", type=int, default=3, help="repetitions of the speed-ups (medians are kept)"
    )
    parser.add_argument(
        "--with-20m",
        action="store_true",
        help="also a 20,000,000-record download (the whole run at size, and --downloads)",
    )
    parser.add_argument(
        "--download-cache", type=Path, default=None, help="generated downloads (default: <out>/out)"
    )
    parser.add_argument(
        "--only-derive", action="store_true", help="only gbif_derived vs DuckDB: results/derive.md"
    )
    parser.add_argument("--derive-reps", type=int, default=3, help="alternating pairs in the derive section")
    parser.add_argument("--download-seed", type=int, default=1, help="seed of the generated downloads")
    parser.add_argument(
        "--only-quality",
        action="store_true",
        help="only occurrence_quality against plain PostGIS statements: results/quality.md",
    )
    parser.add_argument(
        "--quality-sizes",
        default="1000000,5000000",
        help="records of the quality section's species, comma-separated",
    )
    parser.add_argument(
        "--only-regions", action="store_true", help="only region_assignment: results/regions.md"
    )
    parser.add_argument(
        "--region-sizes",
        type=lambda text: [int(size) for size in text.split(",") if size.strip()],
        default=[1_000_000, 5_000_000],
        help="records of the one bench species in the regions section, comma-separated",
    )
    parser.add_argument(
        "--region-warmup", type=int, default=1, help="untimed pairs before the regions' timed ones"
    )
    parser.add_argument("--region-layers", default="", help="lab,natural-earth (empty: both)")
    parser.add_argument("--download-reps", type=int, default=1, help="repetitions in the download section")
    parser.add_argument(
        "--download-rss-cap-gb",
        type=float,
        default=8.0,
        help="kill (and record as failed) a download-section process whose RSS passes this",
    )
    parser.add_argument(
        "--only-whole-run", action="store_true", help="only make run over a download: results/whole_run.md"
    )
    parser.add_argument(
        "--whole-run-sizes", type=lambda t: [int(s) for s in t.split(",") if s.strip()], default=[1_000_000]
    )
    parser.add_argument(
        "--whole-run-cache", type=Path, default=None, help="the downloads' cache (default OUT/out)"
    )
    parser.add_argument(
        "--only-refresh",
        action="store_true",
        help="only a month-later download of the same query after a first make run: results/refresh.md",
    )
    parser.add_argument(
        "--refresh-sizes", type=lambda t: [int(s) for s in t.split(",") if s.strip()], default=[1_000_000]
    )
    parser.add_argument(
        "--refresh-shares",
        type=lambda t: tuple(float(s) for s in t.split(",")),
        default=None,
        help="the month-later download's shares of records edited, gone and new, e.g. 0.2,0.05,0.05 "
        "(default 0.0075,0.0025,0.0025)",
    )
    parser.add_argument(
        "--at-size-sizes",
        type=lambda t: [int(s) for s in t.split(",") if s.strip()],
        default=list(AT_SIZE_SIZES),
        help="records of the pipeline at size (every asset vs its limit, the whole run), comma-separated",
    )
    parser.add_argument(
        "--at-size-reps", type=int, default=1, help="repetitions in the pipeline-at-size part"
    )
    parser.add_argument(
        "--no-at-size", action="store_true", help="leave out the pipeline at size (bench/at_size.py)"
    )
    parser.add_argument(
        "--only-at-size", action="store_true", help="only the pipeline at size: results/at_size.md"
    )
    args = parser.parse_args(argv)
    server_url = os.environ[DATABASE_URL_VARIABLE]
    command = 'make bench BENCH_ARGS="' + " ".join(sys.argv[1:] if argv is None else argv) + '"'
    if args.only_whole_run:
        from bench import whole_run

        cache = args.whole_run_cache or args.out / "out"
        sizes = args.whole_run_sizes + ([20_000_000] if args.with_20m else [])
        return whole_run.run_only(server_url, args.out, cache, sizes, args.download_seed, args.download_reps)
    if args.only_refresh:
        from bench import refresh

        return refresh.run_only(
            server_url,
            args.out,
            args.whole_run_cache or args.out / "out",
            args.refresh_sizes,
            args.refresh_shares,
        )
    if args.only_downloads:
        return run_downloads_only(args, server_url)
    if args.only_distributed:
        return run_distributed_only(args, server_url, args.only_distributed)
    if args.only_at_size:
        from bench import at_size

        with tempfile.TemporaryDirectory(prefix="surveillance-bench-") as folder:
            section = measure_at_size(args, server_url, Path(folder))
        print(at_size.write(args.out, section, command))
        return 0
    if args.only_masking:
        from bench import masking

        print(masking.measure_masking(server_url, args.masking_sizes, args.reps, args.out))
        return 0
    if args.only_derive:
        return run_derive_only(args, command)
    if args.only_quality:
        from bench import quality

        sizes = [int(size) for size in args.quality_sizes.split(",") if size]
        print(quality.run_only(server_url, args.out, sizes, args.reps))
        return 0
    if args.only_regions:
        from bench import regions

        with tempfile.TemporaryDirectory(prefix="surveillance-bench-") as folder:
            work = Path(folder)
            print(
                regions.run_only(
                    server_url,
                    work,
                    args.out,
                    args.region_sizes,
                    args.reps,
                    warmup=args.region_warmup,
                    chosen=[name for name in args.region_layers.split(",") if name],
                )
            )
        return 0
    return run_plain(args, server_url, command)


def run_plain(args: argparse.Namespace, server_url: str, command: str) -> int:
    """Plain ``make bench``: every section it runs, each into its own file, and results.md over them all."""
    sizes = sorted(set(args.sizes + ([10_000_000] if args.with_10m else [])))
    results: dict[str, Any] = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine(),
        "command": command,
        "reps": args.reps,
        "load_before": [round(x, 2) for x in os.getloadavg()],
    }
    sections: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="surveillance-bench-") as folder:
        work = Path(folder)
        with scratch_database(server_url, f"surveillance_bench_{os.getpid()}") as url:
            sections["load_paths"] = load_paths.measure(
                url, work, sizes, args.reps, args.limit_max_rows, args.sample_reps
            )
            if args.verify_sizes:
                sections["verification"] = verification.measure(url, work, args.verify_sizes, args.reps)
        if not (args.no_lab_run and args.no_parallel):
            parallel = (
                None if args.no_parallel else (args.parallel_species, args.parallel_rows, args.parallel_reps)
            )
            sections["lab_run"] = lab_run.measure(
                server_url, work, args.reps, make_run=not args.no_lab_run, parallel=parallel
            )
        if args.downloads:
            sections["downloads"] = download_section(args, server_url, work)
        if args.distributed:
            run_distributed_only(args, server_url, DISTRIBUTED_PARTS)
        if not args.no_at_size:
            sections["at_size"] = measure_at_size(args, server_url, work)
    results["load_after"] = [round(x, 2) for x in os.getloadavg()]
    return write_plain(args.out, results, sections, command)


def write_plain(out: Path, results: dict[str, Any], sections: dict[str, dict[str, Any]], command: str) -> int:
    """Each section's file, then results.md (the at-size scorecard first, when measured, then every
    section's table) and results.json (the run, its ratios and verdicts, every section's figures)."""
    from bench import at_size, downloads

    ratios: dict[str, Any] = {}
    verdicts: dict[str, str] = {}
    for name in ("load_paths", "verification", "lab_run"):
        ratios.update(sections.get(name, {}).get("ratios", {}))
        verdicts.update(sections.get(name, {}).get("verdicts", {}))
    tables = []
    if "at_size" in sections:
        at_size.write(out, sections["at_size"], command)
        tables.append(at_size.markdown(sections["at_size"], ratios, command))
    plain = {
        "load_paths": load_paths.markdown,
        "verification": verification.markdown,
        "lab_run": lab_run.markdown,
    }
    for name, markdown in plain.items():
        if name in sections:
            tables.append(write_section(out, name, sections[name], markdown(sections[name])))
    if "downloads" in sections:
        tables.append(downloads.write(out, sections["downloads"]))
    table = "\n".join([f"# `{command}`, {results['date']}\n", *tables])
    write_results(out, {**results, "ratios": ratios, "verdicts": verdicts, **sections}, table)
    print(table)
    return 0


def measure_at_size(args: argparse.Namespace, server_url: str, work: Path) -> dict[str, Any]:
    """The pipeline at size (bench/at_size.py): every asset vs its limit, the whole run vs its floors."""
    from bench import at_size

    whole_run_sizes = sorted(set(args.at_size_sizes + ([20_000_000] if args.with_20m else [])))
    return at_size.measure_at_size(
        server_url,
        work,
        args.download_cache or args.out / "out",
        args.at_size_sizes,
        whole_run_sizes,
        args.at_size_reps,
        args.download_seed,
        args.download_rss_cap_gb,
    )


def download_section(args: argparse.Namespace, server_url: str, work: Path) -> dict[str, Any]:
    """The GBIF download section at the sizes asked, the 10M and 20M downloads when asked too."""
    from bench import downloads

    extra = ([10_000_000] if args.with_10m else []) + ([20_000_000] if args.with_20m else [])
    sizes = sorted(set(args.download_sizes + extra))
    return downloads.measure_downloads(
        server_url,
        work,
        args.download_cache or args.out / "out",
        sizes,
        seed=args.download_seed,
        reps=args.download_reps,
        rss_cap_gb=args.download_rss_cap_gb,
    )


def run_downloads_only(args: argparse.Namespace, server_url: str) -> int:
    """``--only-downloads``: the section alone, into results/downloads.md and .json."""
    from bench import downloads

    with tempfile.TemporaryDirectory(prefix="surveillance-bench-") as folder:
        section = download_section(args, server_url, Path(folder))
    print(downloads.write(args.out, section))
    return 0


def run_distributed_only(args: argparse.Namespace, server_url: str, parts: str) -> int:
    """``--only-distributed [parts]``: make run under the profile, 1 worker vs 2 and vs local, and a dead
    worker's cost (results/distributed_run.md); ``backfill`` adds the backfill's (results/distributed.md)."""
    chosen = [part.strip() for part in parts.split(",") if part.strip()]
    unknown = sorted(set(chosen) - {"download", "lab", "kills", "backfill"})
    if unknown:
        raise SystemExit(f"--only-distributed: unknown part(s) {', '.join(unknown)}")
    run_parts = [part for part in chosen if part != "backfill"]
    if run_parts:
        from bench.distributed_run import main as distributed_run_main

        distributed_run_main(",".join(run_parts), args.distributed_reps, args.out, machine())
    if "backfill" in chosen:
        from bench import distributed

        with tempfile.TemporaryDirectory(prefix="surveillance-bench-") as folder:
            section = distributed.measure_distributed(
                server_url, Path(folder), args.distributed_reps, machine()
            )
        print(distributed.write(args.out, section))
    return 0


def run_derive_only(args: argparse.Namespace, command: str) -> int:
    """``--only-derive``: gbif_derived's derive next to DuckDB's at each download size; results/derive.md."""
    from bench import derive

    with tempfile.TemporaryDirectory(prefix="surveillance-bench-") as folder:
        section = derive.measure_derive(
            Path(folder),
            args.download_cache or args.out / "out",
            args.download_sizes,
            args.download_seed,
            args.derive_reps,
            args.download_rss_cap_gb,
        )
    print(derive.write(args.out, section, command))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
