"""Resource vectors and the parsing of resource specs: the one copy of that arithmetic.

A :class:`Resources` maps arbitrary, case-sensitive names (``GPU``, ``MEMORY``, ``gpu0``) to
non-negative quantities held exactly in fixed point (``SCALE`` units per 1), so that adding and
removing ``GPU=0.1`` ten times leaves exactly zero. The scheduler's view of a worker and the
worker's own ledger both use these operations.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping

from .errors import ResourceSpecError

TYPE_CHECKING = False  # typing is for type checkers only (see ``protocol/ints.py``)
if TYPE_CHECKING:
    from typing import Iterable, Iterator

#: Units per 1 of any resource: quantities are exact to 1e-4.
SCALE = 10_000
#: The largest quantity of one resource (kept so a quantity always fits a signed 64-bit int).
MAX_QUANTITY = 10**14
#: The resource that counts a worker's interchangeable GPU devices.
GPU = "GPU"
# Specs are read with str methods, not ``re`` (about 9 ms of each ``sched`` call to load),
# and ``decimal`` is loaded only for a quantity that is not a whole number.
#: A resource named ``gpu<N>`` stands for the one device N (as a worker offering
#: ``gpu0=1 gpu1=1`` declares): a task granted it is pinned to that device.
_DEVICE_PREFIX = "gpu"
#: The most GPUs one worker may offer: far above any machine, low enough that a typo such as
#: GPU=1e7 is an error instead of ten million device records.
MAX_GPUS = 1024

_FORM = "expected NAME=VALUE pairs separated by spaces or commas, e.g. \"GPU=2 MEMORY=100e9\""
#: A size is a number and a unit, decimal (``20G``, ``20GB``: 20e9) or binary (``20Gi``,
#: ``20GiB``: 20 * 2**30), in any case; for memory, where people write sizes so.
_PREFIXES = {"k": 1, "m": 2, "g": 3, "t": 4, "p": 5}


class Resources(Mapping):
    """An immutable, hashable vector of resource quantities.

    ``res[name]`` gives the quantity in fixed-point units (``SCALE`` per 1); use
    :meth:`quantity` for the value as a user wrote it. Names absent from the vector count as
    zero in every comparison, so a demand of ``{}`` fits anywhere.
    """

    __slots__ = ("_units", "_hash")

    def __init__(self, units: Mapping[str, int] | None = None):
        self._units: dict[str, int] = dict(units) if units else {}
        self._hash: int | None = None

    # -- construction ---------------------------------------------------------------------

    @classmethod
    def parse(cls, spec: ResourcesLike) -> "Resources":
        """Build from a spec string, a mapping of name to number, or another Resources."""
        if spec is None:
            return EMPTY
        if isinstance(spec, Resources):
            return spec
        if isinstance(spec, str):
            # Immutable, so one per text: a sweep of a thousand jobs asks "GPU=1" each time.
            parsed = _PARSED.get(spec)
            if parsed is None:
                if len(_PARSED) >= 1024:
                    _PARSED.clear()
                parsed = _PARSED[spec] = cls(_parse_text(spec))
            return parsed
        if isinstance(spec, Mapping):
            return cls(_parse_mapping(spec))
        raise ResourceSpecError(
            f"invalid resource spec {spec!r} of type {type(spec).__name__}: {_FORM}, "
            "or a mapping such as {'GPU': 1}"
        )

    @classmethod
    def from_wire(cls, units: Mapping[str, int]) -> "Resources":
        """Rebuild from :meth:`to_wire` output; checks types so a peer cannot smuggle floats."""
        checked: dict[str, int] = {}
        for name, value in units.items():
            if not isinstance(name, str) or not isinstance(value, int) or isinstance(value, bool):
                raise ResourceSpecError(f"invalid resource units {name!r}: {value!r}")
            if value < 0 or value > MAX_QUANTITY * SCALE:
                raise ResourceSpecError(f"resource units out of range for {name!r}: {value}")
            checked[name] = value
        return cls(checked)

    def to_wire(self) -> dict[str, int]:
        return dict(self._units)

    # -- mapping protocol -----------------------------------------------------------------

    def __getitem__(self, name: str) -> int:
        return self._units[name]

    def get(self, name: str, default: int = 0) -> int:  # type: ignore[override]
        return self._units.get(name, default)

    def __iter__(self) -> Iterator[str]:
        return iter(self._units)

    def __len__(self) -> int:
        return len(self._units)

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(frozenset((n, u) for n, u in self._units.items() if u))
        return self._hash

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Resources):
            return NotImplemented
        names = self._units.keys() | other._units.keys()
        return all(self.get(n) == other.get(n) for n in names)

    # -- arithmetic -----------------------------------------------------------------------

    def names(self) -> frozenset[str]:
        """Names with a non-zero quantity."""
        return frozenset(n for n, u in self._units.items() if u)

    def quantity(self, name: str) -> float:
        """The quantity of ``name`` as a number (not exact: for display and user code)."""
        units = self._units.get(name, 0)
        return units // SCALE if units % SCALE == 0 else units / SCALE

    def is_empty(self) -> bool:
        return not any(self._units.values())

    def fits(self, available: Mapping[str, int]) -> bool:
        """True when every quantity here is at most the one in ``available``."""
        get = available.get
        for name, units in self._units.items():
            if units and get(name, 0) < units:
                return False
        return True

    def __le__(self, other: "Resources") -> bool:
        return self.fits(other)

    def __ge__(self, other: "Resources") -> bool:
        return other.fits(self)

    def __add__(self, other: "Resources") -> "Resources":
        units = dict(self._units)
        for name, value in other._units.items():
            units[name] = units.get(name, 0) + value
        return Resources(units)

    def __sub__(self, other: "Resources") -> "Resources":
        """Subtract; raises ``ValueError`` if any quantity would go negative (accounting bug)."""
        units = dict(self._units)
        for name, value in other._units.items():
            left = units.get(name, 0) - value
            if left < 0:
                raise ValueError(
                    f"resource accounting would go negative: {name} {format_units(units.get(name, 0))}"
                    f" - {format_units(value)}"
                )
            units[name] = left
        return Resources(units)

    def __or__(self, other: "Resources") -> "Resources":
        """The largest quantity of each name: what one task needs to run the steps of both."""
        if not other._units:
            return self
        units = dict(self._units)
        for name, value in other._units.items():
            units[name] = max(units.get(name, 0), value)
        return Resources(units)

    def missing_names(self, offered: Iterable[str]) -> list[str]:
        """Names demanded here (non-zero) that are not among ``offered``, sorted."""
        offered = set(offered)
        return sorted(n for n, u in self._units.items() if u and n not in offered)

    def __repr__(self) -> str:
        return f"Resources({str(self)!r})"

    def __str__(self) -> str:
        return " ".join(f"{n}={format_units(u)}" for n, u in sorted(self._units.items()))

    def __reduce__(self):
        return (Resources, (self._units,))


EMPTY = Resources()

#: What ``Resources.parse`` takes.
ResourcesLike = Resources | Mapping[str, object] | str | None


# -- the GPU rules: what a task may ask for and what a worker may offer ----------------------


def device_index(name: str) -> int | None:
    """The device a resource name stands for (``gpu1`` -> 1), or None for any other name."""
    digits = name[len(_DEVICE_PREFIX):] if name.startswith(_DEVICE_PREFIX) else ""
    return int(digits) if digits.isdecimal() else None


def named_devices(resources: Resources) -> tuple[int, ...]:
    """The devices that ``gpu<N>`` names with a non-zero quantity stand for, in order."""
    return tuple(sorted(index for name in resources.names()
                        if (index := device_index(name)) is not None))


def gpu_request_error(units: int) -> str:
    """Why a task may never ask for ``units`` of GPU ("" when it may): a fraction of one GPU
    or a whole number of GPUs, never a fraction above one (no worker could grant GPU=1.5)."""
    if units > SCALE and units % SCALE:
        return (f"invalid GPU request GPU={format_units(units)}: a task may ask for a fraction "
                "of one GPU (e.g. GPU=0.5) or a whole number of GPUs (e.g. GPU=2), not a "
                "fraction above one")
    return ""


def demand_error(demand: Resources) -> str:
    """Why no worker could ever grant ``demand`` as asked ("" when some worker could)."""
    return gpu_request_error(demand.get(GPU, 0))


def check_demand(demand: Resources) -> Resources:
    """``demand`` itself, or ResourceSpecError when no worker could ever grant it."""
    error = demand_error(demand)
    if error:
        raise ResourceSpecError(error)
    return demand


def check_offer(offer: Resources) -> Resources:
    """``offer`` itself, or ResourceSpecError when a worker cannot offer it: its GPUs are
    whole devices, at most ``MAX_GPUS``."""
    units = offer.get(GPU, 0)
    if units % SCALE:
        raise ResourceSpecError(f"invalid worker resource GPU={format_units(units)}: a worker's "
                                "GPUs must be a whole number of devices")
    if units > MAX_GPUS * SCALE:
        raise ResourceSpecError(f"invalid worker resource GPU={format_units(units)}: a worker "
                                f"offers at most {MAX_GPUS} GPUs")
    return offer


def parse_resources(spec: ResourcesLike) -> Resources:
    """Parse a resource spec; see :meth:`Resources.parse`."""
    return Resources.parse(spec)


def parse_quantity(text: object, name: str = "", part: str | None = None) -> int:
    """Turn ``"100e9"``, ``2``, ``0.5`` into fixed-point units, or raise ResourceSpecError."""
    shown = part if part is not None else f"{name}={text}"
    if isinstance(text, bool):
        raise ResourceSpecError(f"invalid resource {shown!r}: the value must be a number; {_FORM}")
    if isinstance(text, float):
        import math

        if not math.isfinite(text):
            raise ResourceSpecError(f"invalid resource {shown!r}: the value must be finite; {_FORM}")
        text = repr(float(text))  # a float's own digits: numpy's float64 shows its type too
    multiplier = 1
    if isinstance(text, str):
        text, multiplier = _size(text)
    text = str(text)
    number = text.strip()
    if number.isascii() and number.isdigit() and len(number) <= 18:  # whole: exact as an int
        if int(number) * multiplier > MAX_QUANTITY:
            raise _above_maximum(shown)
        return int(number) * multiplier * SCALE
    from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation

    try:
        value = Decimal(number) * multiplier
    except InvalidOperation:
        raise ResourceSpecError(
            f"invalid resource {shown!r}: {text!r} is not a number (or a size, as 20G "
            f"or 20GiB); {_FORM}"
        ) from None
    if not value.is_finite():
        raise ResourceSpecError(f"invalid resource {shown!r}: the value must be finite; {_FORM}")
    # Decimal() also takes "1_000" and the digits of other scripts ("٣"), which read as
    # something else to a person, a shell script or a log search.
    if not number.isascii() or "_" in number:
        why = ("the value may not hold '_' separators (write 1000 or 1e3)" if "_" in number
               else "the value must be written with the ASCII digits 0-9")
        raise ResourceSpecError(f"invalid resource {shown!r}: {why}")
    if value < 0:
        raise ResourceSpecError(f"invalid resource {shown!r}: the value must not be negative; {_FORM}")
    if value > MAX_QUANTITY:
        raise _above_maximum(shown)
    units = int((value * SCALE).to_integral_value(rounding=ROUND_HALF_EVEN))
    if units == 0 and value != 0:
        raise ResourceSpecError(
            f"invalid resource {shown!r}: the value is below the resolution {1 / SCALE}"
        )
    return units


def _above_maximum(shown: str) -> ResourceSpecError:
    return ResourceSpecError(
        f"invalid resource {shown!r}: the value is above the maximum {MAX_QUANTITY:.0e}")


def _size(text: str) -> tuple[str, int]:
    """``text`` as its number and the multiplier of its unit: ``("20", 10**9)`` for ``20G``
    or ``20GB``, ``("20", 2**30)`` for ``20Gi`` or ``20GiB``, in any case; ``(text, 1)``
    where it ends in no unit."""
    body = text.strip()
    body = body[:-1] if body[-1:] in ("b", "B") else body
    binary = body[-1:] in ("i", "I")
    body = body[:-1] if binary else body
    power = _PREFIXES.get(body[-1:].lower())
    number = body[:-1].rstrip()
    if power is None or "\n" in number:  # a number and its unit are written on one line
        return text, 1
    return number, (1024 if binary else 1000) ** power


def format_units(units: int) -> str:
    """Fixed-point units as short decimal text: ``2``, ``0.5``, ``1e11``."""
    from decimal import Decimal

    value = (Decimal(units) / SCALE).normalize()
    _, digits, exponent = value.as_tuple()
    if isinstance(exponent, int) and exponent >= 6:
        mantissa = Decimal((0, digits, 1 - len(digits)))
        return f"{mantissa}e{exponent + len(digits) - 1}"
    return format(value, "f")


def _check_name(name: object, part: str) -> str:
    if not isinstance(name, str):
        raise ResourceSpecError(f"invalid resource {part!r}: the name must be a string, not "
                                f"{type(name).__name__} {name!r}")
    if not name:
        raise ResourceSpecError(f"invalid resource {part!r}: the name is empty; {_FORM}")
    if any(char.isspace() or char in ",=" for char in name):
        raise ResourceSpecError(
            f"invalid resource {part!r}: names may not hold spaces, commas or '='; {_FORM}"
        )
    return name


#: Resources parsed from text, by the text (``Resources.parse``).
_PARSED: dict[str, "Resources"] = {}


def _parse_text(spec: str) -> dict[str, int]:
    units: dict[str, int] = {}
    for part in _parts(spec):
        name, sep, value = part.partition("=")
        if not sep:
            raise ResourceSpecError(f"invalid resource {part!r}: {_FORM}")
        if not value:
            raise ResourceSpecError(f"invalid resource {part!r}: the value is missing; {_FORM}")
        _check_name(name, part)
        if name in units:
            raise ResourceSpecError(f"invalid resource spec {spec!r}: {name!r} is given twice")
        units[name] = parse_quantity(value, name, part)
    return units


def _parts(spec: str) -> list[str]:
    """The ``NAME=VALUE`` parts of a spec: what spaces and commas separate."""
    return spec.replace(",", " ").split()


def _parse_mapping(spec: Mapping[str, object]) -> dict[str, int]:
    units: dict[str, int] = {}
    for name, value in spec.items():
        part = f"{name}={value}"
        _check_name(name, part)
        if isinstance(value, Mapping):
            raise ResourceSpecError(f"invalid resource {name!r}: the value must be a number, not a table")
        units[name] = parse_quantity(value, name, part)
    return units
