"""The plan: what the next ``make run`` would load, and why, without writing anything (``make plan``, and
the ``plan_next_run`` job in the UI).

Each asset's job key is computed the way its load computes it, from what is on disk and in the state
rows now, and compared with the key its partition holds (the habit of SQLMesh's and Terraform's
``plan``). The reasons are the ones the run gives: ``first load``, ``input changed``, ``config changed``,
``transform changed`` (the code), ``target edited outside the pipeline (...)`` (core/fingerprints.py), and
``after <asset>`` when an upstream partition loads a new key first.

What only the run can know is said as such: GBIF's answer (``gbif_raw`` asks GBIF at run time; the plan
takes the answer to be the one on disk, so a changed answer loads more than planned; with
``GBIF_SOURCE=download`` the answer is the downloads folder, which the plan reads as the run will,
counting the records ``occurrences`` will add, change and remove: downloads.py), whether a
re-derived file comes out different, and what the geocoder answers for localities it was never asked
(``may load``). Reads only: a read-only connection, no file written, no Dagster run.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from surveillance_pipeline.core.day_files import is_day_file_name
from surveillance_pipeline.core.errors import StaleInputError
from surveillance_pipeline.core.fingerprints import EDITED_OUTSIDE, partition_watch
from surveillance_pipeline.core.keys import (
    JobKeyParts,
    changed_parts,
    describe_change,
    sha256_file,
    sha256_hex,
)
from surveillance_pipeline.core.record_delta import RecordChanges, change_counts, describe_changes
from surveillance_pipeline.core.refresh import WHOLE_TARGET, last_loaded_parts, last_recorded_output
from surveillance_pipeline.core.settings import RELEASE_MASKING_KEY_VARIABLE
from surveillance_pipeline.core.targets import WHOLE_TARGET_REF, Target
from surveillance_pipeline.gbif.ingest import stored_snapshot
from surveillance_pipeline.gbif.registry import Species, load_registry
from surveillance_pipeline.geocoding.service import ledger_key
from surveillance_pipeline.ledger.batches import applied_checksums
from surveillance_pipeline.ledger.feed import OCCURRENCE_FEED, batch_path
from surveillance_pipeline.occurrences.derive import DERIVED_ASSET, memo_holds
from surveillance_pipeline.occurrences.load import DELTA_SHARE_LIMIT as OCCURRENCE_DELTA_SHARE_LIMIT
from surveillance_pipeline.occurrences.load import OCCURRENCES, OccurrenceRules, occurrence_job_parts
from surveillance_pipeline.orchestration.resources import DataPaths, GeocoderSource
from surveillance_pipeline.orchestration.run_config import op_config
from surveillance_pipeline.places.geocoded import GEOCODED_LOCALITIES, geocoded_parts, localities_to_geocode
from surveillance_pipeline.places.ledger import answers_for
from surveillance_pipeline.places.regions import REGION_ASSIGNMENT, REGIONS, RegionLayer, assignment_parts_of
from surveillance_pipeline.planning.downloads import PlannedDownloads, PlannedRaw, planned_rows
from surveillance_pipeline.quality.flags import OCCURRENCE_QUALITY, quality_parts_of
from surveillance_pipeline.quality.policy import drops_flagged
from surveillance_pipeline.quality.references import QUALITY_REFERENCES, ReferenceLayers
from surveillance_pipeline.quality.settings import configured_rules
from surveillance_pipeline.releases.build import (
    DEFAULT_EXPORT_POLICY,
    devil_snapshot_export_input,
    sample_export_input,
)
from surveillance_pipeline.releases.exports import export_is_current
from surveillance_pipeline.releases.masking import STAGE as MASKED_RELEASE
from surveillance_pipeline.releases.masking import MaskingRules, masked_release_parts, release_input
from surveillance_pipeline.releases.quality_report import REPORT, report_parts
from surveillance_pipeline.samples.load import (
    DEFAULT_POLICY,
    OCCURRENCE_SAMPLE,
    sample_input,
    sample_job_parts,
)
from surveillance_pipeline.snapshots.deliveries import newest_delivery, read_delivery
from surveillance_pipeline.snapshots.devil import (
    DEVIL_SLUG,
    SnapshotRules,
    snapshot_job_parts,
    snapshot_target,
)

LOAD = "load"
MAY_LOAD = "may load"
SKIP = "skip"
ORDER = (
    "gbif_raw",
    "gbif_derived",
    "occurrences",
    "quality_references",
    "occurrence_quality",
    "occurrence_sample",
    "masked_release",
    "geocoded_localities",
    "regions",
    "region_assignment",
    "occurrence_batches",
    "occurrence_feed",
    "devil_snapshot",
    "occurrence_sample_summary",
    "devil_snapshot_export",
    "sample_export",
    "quality_report",
)
# Tables an asset's step loads besides its own (a layer first, or the feed its batches build): the UI has
# no asset of that name, so a line about one names the asset first, as "asset/table".
TABLES_OF_ASSETS = {
    "quality_references": "occurrence_quality",
    "regions": "region_assignment",
    "occurrence_feed": "occurrence_batches",
}


def shown_name(name: str) -> str:
    """An asset's name as the UI shows it; a table loaded by another asset's step as "asset/table"."""
    owner = TABLES_OF_ASSETS.get(name)
    return f"{owner}/{name}" if owner else name


@dataclass(frozen=True)
class Step:
    """What the next run does with one partition of one asset, and why."""

    action: str
    # The reason the run will give (in its provenance, its table and Dagster's event).
    reason: str
    # Whether the partition's key (its data version) changes: True, False, or None (only the run knows).
    new_key: bool | None
    # The upstream asset whose new key makes this one load, when that is why.
    after: str = ""
    # The records a load by record-level delta would add, change and remove, where the plan can count
    # them as the run will (occurrences from downloads).
    changes: RecordChanges | None = None

    def describe(self) -> str:
        return f"{self.reason} (after {self.after})" if self.after else self.reason

    def describe_with_changes(self) -> str:
        return f"{self.describe()}: {self.changes.describe()}" if self.changes else self.describe()


SKIPPED = Step(SKIP, "nothing changed", False)
# No delivery of the devil's yet (a registry without the devil): devil_snapshot loads nothing.
NO_DELIVERY = "no delivery yet"
ASKS_GBIF = Step(SKIP, "asks GBIF at run time: loads only if its answer changed", False)


def _held_request(raw: Path) -> dict[str, Any] | None:
    """The request the species' stored raw snapshot answers; None when it cannot be read."""
    held = stored_snapshot(raw)
    return held.request if held is not None else None


@dataclass
class Plan:
    steps: dict[str, dict[str, Step]] = field(default_factory=lambda: defaultdict(dict))
    # Downloads the run has not indexed yet, which the plan indexed in a temporary folder to read them.
    indexed_here: list[str] = field(default_factory=list)

    def add(self, asset: str, partition: str, step: Step) -> Step:
        self.steps[asset][partition] = step
        return step

    def loads(self, action: str = LOAD) -> dict[tuple[str, str], str]:
        """(asset, partition) -> the reason the run will give, of every partition it will (or may) load."""
        return {
            (asset, partition): step.reason
            for asset, partitions in self.steps.items()
            for partition, step in partitions.items()
            if step.action == action
        }

    def lines(self, listed: int = 20) -> list[str]:
        width = max(len("asset"), *(len(shown_name(asset)) for asset in self.steps))
        lines = [f"{'asset':<{width}} {'load':>5} {'may':>5} {'skip':>5}  reasons"]
        for asset in sorted(self.steps, key=lambda a: (ORDER.index(a) if a in ORDER else len(ORDER), a)):
            steps = self.steps[asset].values()
            actions = Counter(step.action for step in steps)
            reasons = Counter(step.describe() for step in steps if step.action != SKIP)
            why = ", ".join(f"{reason} ({count})" for reason, count in sorted(reasons.items())) or "-"
            changes: Counter[str] = Counter()
            for step in steps:
                if step.changes is not None:
                    changes.update(change_counts(step.changes.as_dict()))
            if changes:
                why += f"; {describe_changes(changes)}"
            counts = f"{actions[LOAD]:>5} {actions[MAY_LOAD]:>5} {actions[SKIP]:>5}"
            lines.append(f"{shown_name(asset):<{width}} {counts}  {why}")
        for action in (LOAD, MAY_LOAD):
            chosen = sorted(self.loads(action).items())
            if chosen:
                lines += [
                    "",
                    f"partitions that {'will load' if action == LOAD else 'may load'} ({len(chosen)}):",
                ]
                lines += [
                    f"  {shown_name(asset)} {partition}: {step.describe_with_changes()}"
                    for (asset, partition), _ in chosen[:listed]
                    for step in [self.steps[asset][partition]]
                ]
                if len(chosen) > listed:
                    lines.append(f"  … and {len(chosen) - listed} more")
        return lines


def _after(upstream: Sequence[tuple[str, Step]]) -> Step | None:
    """The step an upstream change forces: a new key upstream loads this one (its input changed); an
    unknown one may."""
    for name, step in upstream:
        if step.new_key:
            return Step(LOAD, "input changed", True, after=name)
    for name, step in upstream:
        if step.new_key is None:
            return Step(MAY_LOAD, "input changed", None, after=name)
    return None


class Planner:
    """The plan of one warehouse and data folder, read in one connection."""

    def __init__(
        self,
        conn: psycopg.Connection,
        paths: DataPaths,
        geocoder: GeocoderSource,
        downloads: PlannedDownloads | None = None,
        masking_key_id: str | None = None,
    ) -> None:
        self.conn, self.paths, self.plan = conn, paths, Plan()
        # The id of the release masking key the run will key its draws by (a release's key names it).
        self.masking_key_id = masking_key_id
        # GBIF_SOURCE=download: the downloads gbif_raw will read, so the plan knows its answer.
        self.downloads = downloads
        self.salt = geocoder.ledger_salt
        # The ledger keeps each service's answers apart: the service the run's geocoder names.
        self.geocoder = geocoder.geocoder().service

    def held(self, target: str, partition: str) -> tuple[str, dict[str, Any]] | None:
        row = self.conn.execute(
            "SELECT job_key, parts FROM target_state WHERE target = %s AND partition_key = %s",
            [target, partition],
        ).fetchone()
        return (str(row[0]), dict(row[1])) if row else None

    def held_key(self, target: str, partition: str) -> str:
        held = self.held(target, partition)
        return held[0] if held else ""

    def table(
        self,
        target: Target,
        partition: str,
        partition_ref: str,
        parts: JobKeyParts | None,
        upstream: Sequence[tuple[str, Step]] = (),
    ) -> Step:
        """A table target's step: after an upstream's new key, else by its own key, then by its rows."""
        held = self.held(target.name, partition)
        if held is None:
            return Step(LOAD, "first load", True)
        forced = _after(upstream)
        if forced is not None:
            return forced
        if parts is None:
            return Step(MAY_LOAD, "input changed", None)
        if held[0] != parts.key:
            return Step(LOAD, describe_change(held[1], parts), True)
        watch = partition_watch(self.conn, target, partition_ref)
        if watch.edits:
            return Step(LOAD, f"{EDITED_OUTSIDE} ({watch.edits})", False)
        if not watch.intact:
            return Step(MAY_LOAD, "watch off: the run compares its fingerprint", False)
        return SKIPPED

    def output(
        self, asset: str, partition: str, parts: JobKeyParts, current: bool, upstream: list[tuple[str, Step]]
    ) -> Step:
        """A file output's step: after an upstream's new key, else by its key and its files."""
        if last_recorded_output(self.conn, asset, partition) is None:
            return Step(LOAD, "first load", True)
        forced = _after(upstream)
        if forced is not None:
            return forced
        if current:
            return SKIPPED
        # The reason report_derived_output gives: against the parts of the last load recorded.
        reason = describe_change(last_loaded_parts(self.conn, asset, partition), parts)
        if reason == "key recipe changed":
            reason = "output was missing or edited"
        recorded = last_recorded_output(self.conn, asset, partition)
        return Step(LOAD, reason, recorded is None or recorded.job_key != parts.key)

    def policy_output(
        self,
        asset: str,
        partition: str,
        parts_of: Callable[[], JobKeyParts],
        folder: Path,
        upstream: list[tuple[str, Step]],
    ) -> Step:
        """A file output under a release policy: its key reads the flags, which may not be made yet."""
        try:
            parts = parts_of()
        except StaleInputError:
            # No flags made for these rows yet: the run makes them first (occurrence_quality's step says so).
            if last_recorded_output(self.conn, asset, partition) is None:
                return Step(LOAD, "first load", True)
            return _after(upstream) or Step(LOAD, "input changed", True)
        return self.output(asset, partition, parts, export_is_current(folder, parts.key), upstream)

    def quality_references(self) -> Step:
        layers = ReferenceLayers()
        return self.plan.add(
            QUALITY_REFERENCES.name,
            WHOLE_TARGET,
            self.table(QUALITY_REFERENCES, WHOLE_TARGET, WHOLE_TARGET_REF, layers.parts()),
        )

    def quality(self, species: Species, derived: Step, occurrences: Step, references: Step) -> Step:
        """occurrence_quality's step: its key from the raw file, the keys its inputs hold and the config."""
        raw = self.paths.raw(species.slug)
        occurrences_key = self.held_key(OCCURRENCES.name, species.slug)
        references_key = self.held_key(QUALITY_REFERENCES.name, WHOLE_TARGET)
        parts = None
        if raw.is_file() and occurrences_key and references_key:
            rules = configured_rules(op_config(OCCURRENCE_QUALITY.name))
            layers = ReferenceLayers()
            parts = quality_parts_of(
                species, sha256_file(raw), occurrences_key, references_key, rules, layers
            )
        upstream = [
            ("gbif_derived", derived),
            ("occurrences", occurrences),
            (QUALITY_REFERENCES.name, references),
        ]
        step = self.table(OCCURRENCE_QUALITY, species.slug, str(species.species_id), parts, upstream)
        if step.action == LOAD and step.new_key and step.reason != "first load":
            # Its data version is its rows' digest: whether a reload flags other records only the run knows.
            return Step(LOAD, step.reason, None, step.after)
        return step

    def species(self, species: Species, layer: RegionLayer, regions: Step, references: Step) -> None:
        slug, ref, add = species.slug, str(species.species_id), self.plan.add
        raw, derived = self.paths.raw(slug), self.paths.derived(slug)
        planned = self.downloads.raw(species, raw) if self.downloads is not None else None
        if not raw.is_file():
            raw_step = add("gbif_raw", slug, Step(LOAD, "first load", True))
        elif planned is not None:
            # Read from the downloads at hand: the plan knows the answer the run will take.
            raw_step = add("gbif_raw", slug, Step(LOAD, planned.reason, True) if planned.reason else SKIPPED)
        elif _held_request(raw) != species.request():
            # Searched now, its snapshot holding another request's answer (a download's, when no download
            # holds the species any more): the run writes a new snapshot whatever the answer.
            raw_step = add("gbif_raw", slug, Step(LOAD, "request changed", True))
        else:
            raw_step = add("gbif_raw", slug, ASKS_GBIF)

        memo = last_recorded_output(self.conn, DERIVED_ASSET, slug)
        if memo is None or not derived.is_file():
            derived_step = add("gbif_derived", slug, Step(LOAD, "first load", True))
        elif raw_step.new_key:
            derived_step = add("gbif_derived", slug, Step(LOAD, "input changed", True, after="gbif_raw"))
        elif memo_holds(raw, memo, derived):
            derived_step = add("gbif_derived", slug, SKIPPED)
        else:
            # Derived again; whether the file comes out different only the derive can tell.
            derived_step = add("gbif_derived", slug, Step(LOAD, "input changed", None))

        occurrence_rules = OccurrenceRules(**op_config("occurrences"))
        if planned is not None and planned.reason and derived_step.reason != "first load":
            occurrences = add(
                "occurrences", slug, self.planned_occurrences(species, planned, occurrence_rules)
            )
        else:
            occurrence_parts = None
            if derived_step.new_key is False:
                occurrence_parts = occurrence_job_parts(derived, occurrence_rules)
            occurrences = add(
                "occurrences",
                slug,
                self.table(OCCURRENCES, slug, ref, occurrence_parts, [("gbif_derived", derived_step)]),
            )
        quality = add(
            OCCURRENCE_QUALITY.name, slug, self.quality(species, derived_step, occurrences, references)
        )
        occurrences_key = self.held_key(OCCURRENCES.name, slug)
        sample_config = op_config("occurrence_sample")
        cap = int(sample_config.get("cap", 100))
        policy = str(sample_config.get("policy", DEFAULT_POLICY))
        sample_upstream = [("occurrences", occurrences)]
        if drops_flagged(policy):
            sample_upstream.append((OCCURRENCE_QUALITY.name, quality))
        sample_parts = None
        if occurrences_key:
            try:
                input_key = sample_input(self.conn, slug, occurrences_key, policy, refuse_edits=False)
                sample_parts = sample_job_parts(input_key, cap, policy)
            except StaleInputError:
                pass  # no flags made for these rows yet: the run makes them first
        add(
            "occurrence_sample",
            slug,
            self.table(OCCURRENCE_SAMPLE, slug, ref, sample_parts, sample_upstream),
        )
        rules = MaskingRules(**op_config("masked_release"))
        release_upstream = [("occurrences", occurrences)]
        if rules.drops_flagged:
            release_upstream.append((OCCURRENCE_QUALITY.name, quality))
        key_id = self.masking_key_id
        add(
            MASKED_RELEASE,
            slug,
            Step(MAY_LOAD, f"{RELEASE_MASKING_KEY_VARIABLE} is not set where this plan ran", None)
            if key_id is None
            else self.policy_output(
                MASKED_RELEASE,
                slug,
                lambda: masked_release_parts(
                    release_input(self.conn, slug, rules, occurrences_key, refuse_edits=False)[0],
                    rules,
                    key_id,
                ),
                self.paths.partition(MASKED_RELEASE, slug),
                release_upstream,
            ),
        )

        geocoded = add("geocoded_localities", slug, self.geocoded(species, raw_step))
        inputs = {
            "occurrences": occurrences_key,
            "geocoded_localities": self.held_key(GEOCODED_LOCALITIES.name, slug),
            "regions": self.held_key(REGIONS.name, WHOLE_TARGET),
        }
        assignment_parts = assignment_parts_of(inputs, layer)
        upstream = [("occurrences", occurrences), ("geocoded_localities", geocoded), ("regions", regions)]
        add("region_assignment", slug, self.table(REGION_ASSIGNMENT, slug, ref, assignment_parts, upstream))

    def planned_occurrences(self, species: Species, planned: PlannedRaw, rules: OccurrenceRules) -> Step:
        """occurrences after a new raw snapshot from the downloads: the key of the file the derive will
        write, and, where the run would load by delta, the records it would add, change and remove."""
        assert self.downloads is not None
        slug, ref = species.slug, str(species.species_id)
        held = self.held(OCCURRENCES.name, slug)
        derived = self.paths.derived(slug)
        if held is None or not derived.is_file():
            return self.table(OCCURRENCES, slug, ref, None, [("gbif_derived", Step(LOAD, "", True))])
        rows = planned_rows(planned, species, derived, rules, OCCURRENCE_DELTA_SHARE_LIMIT)
        parts = OCCURRENCES.key_parts(rows.derived_sha256, rules.as_config())
        step = self.table(OCCURRENCES, slug, ref, parts)
        if step.action != LOAD or step.reason != "input changed":
            return step
        # The rows were compared with the derived file on disk: the base of a delta only when the held
        # key was made from that file (and the run tries a delta: only the input changed, no edit noted).
        watch = partition_watch(self.conn, OCCURRENCES, ref)
        from_this_file = held[1].get("input") == sha256_file(derived)
        if changed_parts(held[1], parts) == ["input"] and from_this_file and watch.intact and not watch.edits:
            return Step(LOAD, step.reason, True, after="gbif_derived", changes=rows.changes)
        return Step(LOAD, step.reason, True, after="gbif_derived")

    def geocoded(self, species: Species, raw_step: Step) -> Step:
        raw = self.paths.raw(species.slug)
        if not raw.is_file() or raw_step.reason == "first load":
            return Step(LOAD, "first load", True)
        if raw_step.new_key:
            # A new raw snapshot (from downloads): whether its localities or their answers differ, the
            # run tells once the file is written.
            return Step(MAY_LOAD, "input changed", None, after="gbif_raw")
        records = localities_to_geocode(raw, species)
        key_of = {text: ledger_key(self.salt, text) for text in sorted({r.normalized for r in records})}
        entries = answers_for(self.conn, self.geocoder, key_of.values())
        missing = set(key_of.values()) - set(entries)
        if missing:
            return Step(MAY_LOAD, f"asks the geocoder about {len(missing)} localities", None)
        parts = geocoded_parts([(r.id, key_of[r.normalized]) for r in records], entries, self.geocoder)
        return self.table(GEOCODED_LOCALITIES, species.slug, str(species.species_id), parts)

    def regions(self) -> tuple[RegionLayer, Step]:
        config = op_config("region_assignment")
        layer = RegionLayer.configured(
            config.get("layer", ""),
            config.get("id_property", "region_id"),
            config.get("name_property", "name"),
            default=self.paths.region_layer,
        )
        return layer, self.plan.add(
            "regions", WHOLE_TARGET, self.table(REGIONS, WHOLE_TARGET, WHOLE_TARGET_REF, layer.parts())
        )

    def batches(self) -> None:
        folder = self.paths.batches()
        applied = applied_checksums(self.conn, OCCURRENCE_FEED.name)
        days = sorted(path.stem for path in folder.glob("*.csv") if is_day_file_name(path.name))
        for day in days:
            path = batch_path(folder, day)
            known = sha256_hex(path.read_bytes()) in applied
            self.plan.add("occurrence_batches", day, SKIPPED if known else Step(LOAD, "new batch", True))
        watch = partition_watch(self.conn, OCCURRENCE_FEED, WHOLE_TARGET_REF)
        if watch.edits:
            self.plan.add(
                "occurrence_feed", WHOLE_TARGET, Step(LOAD, f"{EDITED_OUTSIDE} ({watch.edits})", False)
            )

    def devil(self) -> Step:
        path = newest_delivery(self.paths.deliveries(DEVIL_SLUG))
        if path is None:
            return self.plan.add("devil_snapshot", WHOLE_TARGET, Step(SKIP, NO_DELIVERY, False))
        config = op_config("devil_snapshot")
        rules = SnapshotRules(cap=int(config.get("cap", 1000)), licenses=tuple(config.get("licenses", ())))
        parts = snapshot_job_parts(read_delivery(path), rules, snapshot_target())
        return self.plan.add(
            "devil_snapshot",
            WHOLE_TARGET,
            self.table(snapshot_target(), WHOLE_TARGET, WHOLE_TARGET_REF, parts),
        )

    def whole(self, devil: Step) -> None:
        """The unpartitioned outputs: after what they read loads a new key, else by their own files."""
        flags = _merge(self.plan.steps[OCCURRENCE_QUALITY.name].values())
        report = report_parts(self.conn)
        current = export_is_current(self.paths.exports(REPORT), report.key)
        self.plan.add(
            REPORT,
            WHOLE_TARGET,
            self.output(REPORT, WHOLE_TARGET, report, current, [(OCCURRENCE_QUALITY.name, flags)]),
        )
        sample = _merge(self.plan.steps["occurrence_sample"].values())
        summary = self.plan.add(
            "occurrence_sample_summary", WHOLE_TARGET, _after([("occurrence_sample", sample)]) or SKIPPED
        )
        sample_policy = str(op_config("sample_export").get("policy", DEFAULT_EXPORT_POLICY))
        upstream = [("occurrence_sample_summary", summary)]
        if drops_flagged(sample_policy):
            upstream.append((OCCURRENCE_QUALITY.name, flags))
        self.plan.add(
            "sample_export",
            WHOLE_TARGET,
            self.policy_output(
                "sample_export",
                WHOLE_TARGET,
                lambda: sample_export_input(self.conn, sample_policy, refuse_edits=False).parts,
                self.paths.exports("sample"),
                upstream,
            ),
        )
        if devil.reason == NO_DELIVERY:
            # devil_snapshot ends without an output, and Dagster skips the export that reads it.
            self.plan.add("devil_snapshot_export", WHOLE_TARGET, Step(SKIP, NO_DELIVERY, False))
            return
        devil_policy = str(op_config("devil_snapshot_export").get("policy", DEFAULT_EXPORT_POLICY))
        upstream = [("devil_snapshot", devil)]
        if drops_flagged(devil_policy):
            upstream.append(
                (OCCURRENCE_QUALITY.name, self.plan.steps[OCCURRENCE_QUALITY.name].get(DEVIL_SLUG, SKIPPED))
            )
        self.plan.add(
            "devil_snapshot_export",
            WHOLE_TARGET,
            self.policy_output(
                "devil_snapshot_export",
                WHOLE_TARGET,
                lambda: devil_snapshot_export_input(self.conn, devil_policy, refuse_edits=False).parts,
                self.paths.exports("devil_snapshot"),
                upstream,
            ),
        )

    def run(self, species_planned: Sequence[Species] | None = None) -> Plan:
        layer, regions = self.regions()
        references = self.quality_references()
        for species in load_registry() if species_planned is None else species_planned:
            self.species(species, layer, regions, references)
        self.batches()
        self.whole(self.devil())
        return self.plan


def _merge(steps: Any) -> Step:
    """One step standing for many partitions: a new key if any has one, unknown if any is unknown."""
    merged = SKIPPED
    for step in steps:
        if step.new_key:
            return Step(LOAD, step.reason, True)
        if step.new_key is None:
            merged = Step(MAY_LOAD, step.reason, None)
    return merged


def make_plan(
    conn: psycopg.Connection,
    paths: DataPaths,
    geocoder: GeocoderSource,
    species: list[Species] | None = None,
    *,
    reads_downloads: bool = False,
    masking_key_id: str | None = None,
) -> Plan:
    """The plan, read in one snapshot, in a transaction that is rolled back whatever it did: the ledger's
    reads share-lock their rows, and nothing may stay of a plan.

    ``reads_downloads`` (GBIF_SOURCE=download): gbif_raw's answer is read from the downloads folder, as the
    run will read it, and occurrences' record changes are counted; a download the run has not indexed yet
    is indexed in a temporary folder, deleted with the plan. ``masking_key_id``: the id of the release masking
    key the run keys its releases by (ReleaseMasking); without it, a release may load (its key is unknown)."""
    registry = load_registry() if species is None else species
    with contextlib.ExitStack() as stack:
        downloads = None
        if reads_downloads:
            scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="surveillance-plan-")))
            # Indexed for the whole registry, as gbif_raw indexes them, whichever species are planned.
            downloads = PlannedDownloads(paths.downloads(), paths.download_index(), load_registry(), scratch)
        with conn.transaction(force_rollback=True):
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            plan = Planner(conn, paths, geocoder, downloads, masking_key_id).run(registry)
        plan.indexed_here = downloads.indexed_here if downloads is not None else []
        return plan
