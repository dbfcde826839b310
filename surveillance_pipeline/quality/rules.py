"""The record-quality tests: named, versioned rules with parameters, each its own flag column.

A test never drops a record: ``occurrence_quality`` keeps one row per record of ``occurrences`` with one
boolean per test (true: flagged; false: passed; null: not evaluated, because the test is disabled or the
record lacks what it reads, e.g. coordinates). The defaults are GBIF's filtering guide and the R package
CoordinateCleaner's (Zizka et al. 2019, Methods Ecol Evol 10:744); each test's ``source`` says which.

Each enabled test's version and parameters are config in the job key of ``occurrence_quality``: changing
one threshold reloads the partitions it shapes, and a bumped version does the same. Dagster-free.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

# GBIF issue flags that make a record unfit for most analyses (GBIF's "data quality requirements" guide).
SERIOUS_GBIF_ISSUES = (
    "ZERO_COORDINATE",
    "COORDINATE_INVALID",
    "COORDINATE_OUT_OF_RANGE",
    "COUNTRY_COORDINATE_MISMATCH",
    "PRESUMED_SWAPPED_COORDINATE",
    "PRESUMED_NEGATED_LATITUDE",
    "PRESUMED_NEGATED_LONGITUDE",
    "RECORDED_DATE_INVALID",
    "TAXON_MATCH_FUZZY",
    "TAXON_MATCH_HIGHERRANK",
    "TAXON_MATCH_NONE",
)
# Where GBIF itself is: records georeferenced to the publisher's host instead of the place (CoordinateCleaner
# cc_gbif: 12.58 E, 55.67 N).
GBIF_HEADQUARTERS = (12.58, 55.67)


@dataclass(frozen=True)
class QualityTest:
    """One test: its flag column is ``flag_<name>``; ``version`` is bumped when what it flags for the same
    parameters changes; ``defaults`` are its parameters; ``reads`` the reference layers it reads (whose
    checksums then enter the key)."""

    name: str
    version: int
    description: str
    source: str
    defaults: Mapping[str, Any] = field(default_factory=dict)
    enabled_by_default: bool = True
    reads: tuple[str, ...] = ()

    @property
    def column(self) -> str:
        return f"flag_{self.name}"


# In this order: a record's first reason is the first enabled test that flags it.
TESTS: tuple[QualityTest, ...] = (
    QualityTest(
        "gbif_issues",
        1,
        "carries a serious GBIF issue flag",
        "GBIF data quality guide; rgbif occ_issues",
        {"issues": list(SERIOUS_GBIF_ISSUES)},
    ),
    QualityTest(
        "basis",
        1,
        "basisOfRecord says the record is not of a wild organism in place",
        "GBIF data quality guide",
        {"basis_of_record": ["FOSSIL_SPECIMEN", "LIVING_SPECIMEN"]},
    ),
    QualityTest(
        "uncertainty",
        1,
        "coordinateUncertaintyInMeters over the limit, or a known placeholder value",
        "GBIF guide; CoordinateCleaner",
        {"limit_m": 10_000.0, "placeholders_m": [301.0, 999.0, 3036.0, 9999.0]},
    ),
    QualityTest(
        "precision",
        1,
        "coordinatePrecision coarser than the limit (degrees)",
        "GBIF guide",
        {"limit_degrees": 0.01},
    ),
    QualityTest("old", 1, "year before the limit", "CoordinateCleaner cf_age", {"before_year": 1900}),
    QualityTest(
        "zero",
        1,
        "within a radius (planar degrees) of 0,0",
        "CoordinateCleaner cc_zero",
        {"radius_degrees": 0.5},
    ),
    QualityTest("equal", 1, "|latitude| = |longitude|", "CoordinateCleaner cc_equ (absolute)"),
    QualityTest(
        "capitals",
        1,
        "within a radius (geodesic metres) of a country capital",
        "CoordinateCleaner cc_cap",
        {"radius_m": 10_000.0},
        reads=("places",),
    ),
    QualityTest(
        "centroids",
        1,
        "within a radius (geodesic metres) of a country or province centroid",
        "CoordinateCleaner cc_cen",
        {"radius_m": 1_000.0},
        reads=("countries", "provinces"),
    ),
    QualityTest(
        "gbif_hq",
        1,
        "within a radius (geodesic metres) of GBIF's headquarters",
        "CoordinateCleaner cc_gbif",
        {"radius_m": 1_000.0},
    ),
    QualityTest(
        "sea",
        1,
        "farther than the buffer (geodesic metres) from land, for a terrestrial species",
        "CoordinateCleaner cc_sea",
        # Natural Earth's 1:50m land leaves out small islands and cuts coasts: of 916 real plant records
        # (GBIF search answers, mostly coastal Californian Encelia californica), 97 lie off its land, 54
        # more than 1 km off, 33 more than 2 km (26 on one New Caledonian islet the layer lacks), 5 more
        # than 5 km (two at 0,0, three 6.8-12.8 km offshore). docs/quality.md has the measurement.
        {"buffer_m": 5_000.0},
        reads=("land",),
    ),
    QualityTest(
        "urban",
        1,
        "inside an urban area",
        "CoordinateCleaner cc_urb",
        enabled_by_default=False,
        reads=("urban",),
    ),
    QualityTest(
        "country",
        1,
        "farther than the buffer (geodesic metres) from the polygon of its countryCode",
        "CoordinateCleaner cc_coun",
        {"buffer_m": 10_000.0},
        reads=("countries",),
    ),
    QualityTest(
        "duplicates",
        1,
        "same species, point and dataset as a record with a lower gbifID",
        "CoordinateCleaner cc_dupl",
    ),
    QualityTest(
        "outliers",
        2,
        "mean great-circle distance to the species' other records above quantile 0.75 + multiplier x IQR",
        "CoordinateCleaner cc_outl (method quantile)",
        {"multiplier": 5.0, "min_records": 7, "exact_up_to_points": 10_000, "cell_degrees": 0.5},
    ),
)
TESTS_BY_NAME = {test.name: test for test in TESTS}


class QualityConfigError(ValueError):
    pass


@dataclass(frozen=True)
class QualityRules:
    """Which tests run and with what parameters: the config part of ``occurrence_quality``'s key."""

    # Test name -> its parameters (every one, defaults filled in); only the enabled tests.
    enabled: Mapping[str, Mapping[str, Any]]

    @classmethod
    def from_settings(
        cls, disabled: Iterable[str] | None = None, parameters: Mapping[str, Mapping[str, Any]] | None = None
    ) -> QualityRules:
        """The defaults, less ``disabled`` tests (None: the tests off by default), with ``parameters``
        overriding defaults per test. Unknown names and parameters are refused, naming them."""
        disabled_names = (
            {test.name for test in TESTS if not test.enabled_by_default}
            if disabled is None
            else set(disabled)
        )
        overrides = dict(parameters or {})
        unknown = sorted((disabled_names | set(overrides)) - set(TESTS_BY_NAME))
        if unknown:
            raise QualityConfigError(f"quality tests: unknown test {unknown} (known: {list(TESTS_BY_NAME)})")
        enabled: dict[str, dict[str, Any]] = {}
        for test in TESTS:
            given = dict(overrides.get(test.name, {}))
            extra = sorted(set(given) - set(test.defaults))
            if extra:
                raise QualityConfigError(
                    f"quality test {test.name}: unknown parameter {extra} (known: {sorted(test.defaults)})"
                )
            if test.name in disabled_names:
                continue
            enabled[test.name] = {
                name: _typed(test.name, name, _checked(test.name, name, given.get(name, default)), default)
                for name, default in test.defaults.items()
            }
        return cls(enabled)

    def as_config(self) -> dict[str, Any]:
        """Per enabled test: its version and parameters (lists sorted: the same set is the same config)."""
        return {
            name: {"version": TESTS_BY_NAME[name].version, **params} for name, params in self.enabled.items()
        }

    def param(self, test: str, name: str) -> Any:
        return self.enabled.get(test, {}).get(name, TESTS_BY_NAME[test].defaults.get(name))

    def is_enabled(self, test: str) -> bool:
        return test in self.enabled

    def layers_read(self) -> list[str]:
        return sorted({layer for name in self.enabled for layer in TESTS_BY_NAME[name].reads})


def _checked(test: str, name: str, value: Any) -> Any:
    """A parameter as it enters the key: numbers finite and not negative, lists sorted and deduplicated."""
    if isinstance(value, list | tuple):
        items = [_checked(test, name, item) for item in value]
        return sorted(set(items), key=lambda item: (str(type(item)), item))
    if isinstance(value, bool):
        raise QualityConfigError(f"quality test {test}: {name} must be a number or a list, got {value!r}")
    if isinstance(value, int | float):
        if not math.isfinite(value) or value < 0:
            raise QualityConfigError(f"quality test {test}: {name} must be finite and >= 0, got {value!r}")
        return value
    if isinstance(value, str) and value.strip():
        return value.strip()
    raise QualityConfigError(f"quality test {test}: {name} has an unusable value {value!r}")


def _typed(test: str, name: str, value: Any, default: Any) -> Any:
    """A number in its default's type, so 1900 and 1900.0 are one config (and one key)."""
    if isinstance(default, list):
        if not isinstance(value, list):
            raise QualityConfigError(f"quality test {test}: {name} must be a list, got {value!r}")
        if default and isinstance(default[0], float):
            return sorted({_typed(test, name, item, default[0]) for item in value})
        return value
    if isinstance(default, bool) or not isinstance(default, int | float):
        return value
    if isinstance(value, list):
        raise QualityConfigError(f"quality test {test}: {name} must be a number, got a list")
    if isinstance(default, int):
        if not isinstance(value, int | float) or value != int(value):
            raise QualityConfigError(f"quality test {test}: {name} must be a whole number, got {value!r}")
        return int(value)
    if not isinstance(value, int | float):
        raise QualityConfigError(f"quality test {test}: {name} must be a number, got {value!r}")
    return float(value)


# The release policies a masked release or an export can apply over the flags.
POLICY_ANY_ENABLED = "drop_any_flagged"
POLICY_KEEP_ALL = "keep_all"
POLICIES = (POLICY_ANY_ENABLED, POLICY_KEEP_ALL)
