"""What a pinned vLLM version accepts: its flags, env vars, speculative methods and DeepSeek rules, as data.

Pure core, read by ``validation`` (a spec is checked against the facts of its ``runtime.vllmVersion``) and by
``profiles`` / ``render`` (every flag and env var they emit must exist in those facts). Each version has a folder
``data/vllm/<version>/``: ``cli-flags.json``, ``env-vars.json``, ``facts.json`` and ``kv-connectors.json`` are
copied verbatim from the reference read out of the vLLM wheel (a test keeps them equal to ``shared/reference/``);
``rules.yaml`` is nvlfleet's reading of them: flag aliases, where the facts list the keys of each JSON-valued
flag, the DeepSeek families, allowed third-party env prefixes, and the rules a serving must keep, each with a
one-line reason and its source. A new vLLM version is a new folder.

API::

    facts.versions() -> list[str]                      # versions with a data folder, e.g. ["0.33.0"]
    facts.load("0.33.0") -> Facts                       # raises UnknownVersion (a LookupError)
    f.flag("--tensor-parallel-size") -> Flag            # also "-tp", "--no-async-scheduling"; KeyError if unknown
    f.find_flag(spelling) -> Flag | None
    f.parse_args(argv) -> ParsedArgs                    # argparse-like reading of extra args: .args, .errors
    f.json_flags["--eplb-config"] -> JsonFlag           # the keys vLLM accepts inside a JSON-valued flag
    f.env_var(name) -> str ; f.knows_env(name) -> bool  # vllm.envs names (env_var raises KeyError if unknown)
    f.env_allowed(name) -> bool                         # known to vLLM, or a library prefix (NCCL_, UCX_, ...)
    f.removed_env_vars -> {name: what to use instead}   # e.g. VLLM_ALL2ALL_BACKEND -> --all2all-backend
    f.speculative_methods, f.mtp_aliases                # every method vLLM accepts; aliases rewritten to mtp
    f.all2all_backends, f.moe_backends, f.kv_cache_dtypes, f.cudagraph_modes
    f.family("deepseek-v4.1") -> Family                 # speculative methods, attention backends, expert counts
    f.rules -> tuple[Rule, ...]                         # evaluated by nvlfleet.core.validation
    f.raw -> facts.json as a dict                       # anything else the reference says

Flags are identified by their canonical long spelling and by argparse ``dest``; a boolean flag also says which
value it stores (``--no-async-scheduling`` stores False into ``async_scheduling``).
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import json
import re
from collections.abc import Mapping, Sequence
from importlib import resources
from typing import Any, Literal

import yaml

DEFAULT_VERSION = "0.33.0"

Scalar = str | int | float | bool | None
Severity = Literal["error", "warning"]

_DATA = "data/vllm"


class UnknownVersion(LookupError):
    """No facts are packaged for this vLLM version."""

    def __init__(self, version: str) -> None:
        known = ", ".join(versions()) or "none"
        super().__init__(f"nvlfleet has no facts for vLLM {version} (known versions: {known})")
        self.version = version


# ---------------------------------------------------------------------------------------------------------------
# Flags


@dataclasses.dataclass(frozen=True)
class Flag:
    """One ``vllm serve`` option as argparse defines it."""

    name: str  # canonical long spelling, e.g. --tensor-parallel-size
    dest: str  # argparse destination, shared by --x / --no-x / --enable-x / --disable-x
    takes_value: bool
    nargs: str | None  # None: exactly one value; "0": none; "+": one or more; "?": zero or one
    choices: tuple[str, ...] | None
    type: str | None  # argparse type name from the wheel: int, float, str, loads, parse_dataclass, ...

    @property
    def stores(self) -> bool:
        """For a flag without a value: the boolean it stores (False for --no-x and inverted enable/disable)."""
        return self.name == "--" + self.dest.replace("_", "-")


@dataclasses.dataclass(frozen=True)
class Arg:
    """One option read from an argument list, with the index of its first token."""

    index: int
    spelling: str  # as written: -tp, --tensor-parallel-size, --no-async-scheduling
    flag: Flag
    values: tuple[str, ...]

    @property
    def value(self) -> Scalar:
        """The single value (``True``/``False`` for a flag without value, a string otherwise)."""
        if not self.flag.takes_value:
            return self.flag.stores
        if not self.values:
            return None  # an optional value left out (nargs "?")
        return self.values[0] if len(self.values) == 1 else " ".join(self.values)


@dataclasses.dataclass(frozen=True)
class ArgError:
    """Why the token at ``index`` of an argument list is not something ``vllm serve`` accepts."""

    index: int
    message: str


@dataclasses.dataclass(frozen=True)
class ParsedArgs:
    args: tuple[Arg, ...]
    errors: tuple[ArgError, ...]


@dataclasses.dataclass(frozen=True)
class JsonFlag:
    """The top-level keys vLLM accepts in the JSON object of one flag (rules.yaml ``jsonFlags``).

    ``keys`` None: free-form, any key is accepted. ``complete`` False: the facts name only ``keys`` and do not
    list the rest, so another key may exist (it earns a warning, not a refusal).
    """

    flag: str
    keys: frozenset[str] | None
    complete: bool
    rejected: Mapping[str, str]  # keys vLLM refuses although its config class has them -> what to use instead
    source: str

    def key_problem(self, key: str, version: str) -> tuple[Severity, str] | None:
        """Why vLLM ``version`` would refuse ``key`` (or why nvlfleet cannot vouch for it); None when it is fine."""
        if key in self.rejected:
            return "error", f"vLLM {version} refuses key {key!r} in {self.flag}; {self.rejected[key]}"
        if self.keys is None or key in self.keys:
            return None
        known = ", ".join(sorted(self.keys))
        close = difflib.get_close_matches(key, sorted(self.keys), n=1)
        hint = f"did you mean {close[0]}? " if close else ""
        if self.complete:
            return "error", f"vLLM {version} has no key {key!r} in {self.flag}; {hint}it accepts {known}"
        return (
            "warning",
            f"{key!r} is not a key the facts of vLLM {version} know for {self.flag} ({hint}they name {known}); "
            "vLLM refuses a key its config does not have",
        )


# ---------------------------------------------------------------------------------------------------------------
# Rules


@dataclasses.dataclass(frozen=True)
class Matcher:
    """A condition on one setting. ``test`` answers None when the setting is unset and the condition is moot."""

    kind: Literal["equal", "any", "min", "max", "not_in", "set"]
    values: tuple[Scalar, ...]

    def test(self, value: Scalar) -> bool | None:
        if self.kind == "set":
            return (value is not None) == self.values[0]
        if self.kind in ("equal", "any"):
            return any(_same(value, v) for v in self.values)
        if value is None:
            return None
        if self.kind == "not_in":
            return not any(_same(value, v) for v in self.values)
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False
        bound = self.values[0]
        assert isinstance(bound, int | float)  # guaranteed by _matcher
        return value >= bound if self.kind == "min" else value <= bound

    def when(self, value: Scalar) -> bool:
        """As a ``when`` condition: an unset setting matches only an explicit null."""
        return self.test(value) is True

    def holds(self, value: Scalar) -> bool:
        """As a ``require`` condition: an unset setting passes comparisons (nothing to violate)."""
        return self.test(value) is not False


def _same(a: Scalar, b: Scalar) -> bool:
    # True == 1 in Python; a rule about `tensor: 1` must not match `expert: true`.
    return type(a) is type(b) and a == b if isinstance(a, bool) or isinstance(b, bool) else a == b


@dataclasses.dataclass(frozen=True)
class Rule:
    """A constraint on a role's effective settings, with the sentence that explains a violation."""

    id: str
    severity: Severity
    when: Mapping[str, Matcher]
    require: Mapping[str, Matcher]  # empty: the rule forbids what `when` describes
    check: str | None  # a named check implemented in nvlfleet.core.validation, instead of `require`
    message: str  # a str.format template over settings, plus {requirement}
    reason: str
    source: str

    def applies(self, settings: Mapping[str, Scalar]) -> bool:
        return all(m.when(settings.get(key)) for key, m in self.when.items())

    def failures(self, settings: Mapping[str, Scalar]) -> list[str]:
        """The required keys whose setting does not hold (empty when the rule is kept)."""
        return [key for key, m in self.require.items() if not m.holds(settings.get(key))]


@dataclasses.dataclass(frozen=True)
class SettingInfo:
    label: str
    path: str  # may contain {role}


@dataclasses.dataclass(frozen=True)
class ExpertCount:
    pattern: str
    experts: int
    source: str


@dataclasses.dataclass(frozen=True)
class Family:
    """Facts about one DeepSeek family in this vLLM version."""

    name: str
    title: str
    model_pattern: str  # a model name matching this belongs to the family
    speculative_methods: tuple[str, ...]
    speculative_source: str
    attention_backends: tuple[str, ...] | None  # None: not restricted by nvlfleet
    routed_experts: tuple[ExpertCount, ...]

    def matches(self, model_name: str) -> bool:
        return re.search(self.model_pattern, model_name) is not None

    def experts_for(self, model_name: str) -> ExpertCount | None:
        """The routed-expert count of ``model_name`` if the facts know it (by repository name)."""
        return next((c for c in self.routed_experts if re.search(c.pattern, model_name)), None)


@dataclasses.dataclass(frozen=True)
class EnvPrefix:
    prefix: str
    reason: str


# ---------------------------------------------------------------------------------------------------------------
# The facts of one version


@dataclasses.dataclass(frozen=True)
class Facts:
    version: str
    flags: Mapping[str, Flag]  # every long spelling (including --no-x) → Flag
    aliases: Mapping[str, str]  # -tp → --tensor-parallel-size
    attached_aliases: Mapping[str, str]  # -O → --optimization-level (-O3)
    json_flags: Mapping[str, JsonFlag]  # canonical flag name → the keys its JSON object may hold
    env_vars: frozenset[str]
    extra_env_vars: frozenset[str]  # read through os.environ outside vllm.envs
    removed_env_vars: Mapping[str, str]
    env_prefixes: tuple[EnvPrefix, ...]
    speculative_methods: frozenset[str]
    mtp_aliases: frozenset[str]
    all2all_backends: frozenset[str]
    moe_backends: frozenset[str]
    kv_cache_dtypes: frozenset[str]
    cudagraph_modes: frozenset[str]
    families: Mapping[str, Family]
    settings: Mapping[str, SettingInfo]
    rules: tuple[Rule, ...]
    raw: Mapping[str, Any]

    # -- flags ------------------------------------------------------------------------------------------------

    def find_flag(self, spelling: str) -> Flag | None:
        """The flag ``spelling`` names (long form, ``--no-x`` form, underscore spelling or short alias), or None."""
        if _dashed(spelling) in self.flags:
            return self.flags[_dashed(spelling)]
        target = self.aliases.get(spelling) or self.attached_aliases.get(spelling)
        return self.flags.get(target) if target else None

    def flag(self, spelling: str) -> Flag:
        """The flag ``spelling`` names; KeyError (with the closest spellings) when vLLM has no such flag."""
        found = self.find_flag(spelling)
        if found is None:
            raise KeyError(f"vLLM {self.version} has no flag {spelling}{self._did_you_mean(spelling)}")
        return found

    def _did_you_mean(self, spelling: str) -> str:
        known = [*self.flags, *self.aliases]
        close = difflib.get_close_matches(spelling.replace("_", "-"), known, n=2, cutoff=0.75)
        return f"; did you mean {' or '.join(close)}?" if close else ""

    def suggest_flag(self, spelling: str) -> str:
        """``; did you mean --x?`` for a misspelt flag, or the empty string."""
        return self._did_you_mean(spelling)

    def parse_args(self, argv: Sequence[str]) -> ParsedArgs:
        """Read ``argv`` the way ``vllm serve``'s argparse would, without running it.

        Accepts ``--flag value``, ``--flag=value``, underscore spellings (``--max_num_seqs``), short aliases
        (``-tp 4``, ``-tp=4``), ``-O3``, and the ``--no-x`` / ``--disable-x`` forms the wheel defines. Reports
        unknown flags, missing or surplus values, values outside the flag's choices, values of the wrong type,
        and stray positional arguments.
        """
        args: list[Arg] = []
        errors: list[ArgError] = []
        i = 0
        while i < len(argv):
            token = argv[i]
            if not _is_option(token):
                errors.append(ArgError(i, f"unexpected positional argument {token!r}; every extra argument is a flag"))
                i += 1
                continue
            spelling, attached = _split_attached(token)
            flag = self.find_flag(spelling)
            if flag is None:
                prefix = next((p for p in self.attached_aliases if token.startswith(p) and token != p), None)
                if prefix is not None:
                    spelling, attached = prefix, token[len(prefix) :].removeprefix("=")
                    flag = self.flags[self.attached_aliases[prefix]]
            if flag is None:
                hint = self._did_you_mean(spelling)
                if "." in spelling and not hint:
                    base = self.find_flag(spelling.split(".", 1)[0])
                    hint = f"; pass a JSON object to {base.name} instead" if base else ""
                errors.append(ArgError(i, f"vLLM {self.version} has no flag {spelling}{hint}"))
                i += 1
                while i < len(argv) and not _is_option(argv[i]):  # skip the unknown flag's values
                    i += 1
                continue
            start = i
            i += 1
            values: list[str] = []
            if attached is not None:
                if not flag.takes_value:
                    errors.append(ArgError(start, f"{spelling} takes no value (got {attached!r})"))
                    continue
                values.append(attached)
            elif flag.takes_value:
                while i < len(argv) and not _is_option(argv[i]):
                    values.append(argv[i])
                    i += 1
                    if flag.nargs in (None, "?"):
                        break
                if not values and flag.nargs != "?":
                    errors.append(ArgError(start, f"{spelling} needs a value"))
                    continue
            problem = _value_problem(spelling, flag, values)
            if problem:
                errors.append(ArgError(start, problem))
                continue
            args.append(Arg(index=start, spelling=spelling, flag=flag, values=tuple(values)))
        return ParsedArgs(args=tuple(args), errors=tuple(errors))

    # -- env vars ---------------------------------------------------------------------------------------------

    def knows_env(self, name: str) -> bool:
        """True when vLLM itself reads ``name`` (vllm.envs, or os.environ elsewhere in the package)."""
        return name in self.env_vars or name in self.extra_env_vars

    def env_var(self, name: str) -> str:
        """``name`` if vLLM reads it; KeyError otherwise (renderers call this for every env var they emit)."""
        if not self.knows_env(name):
            raise KeyError(f"vLLM {self.version} does not read env var {name}")
        return name

    def env_prefix(self, name: str) -> EnvPrefix | None:
        """The third-party library prefix ``name`` falls under (NCCL_, UCX_, ...), if any."""
        return next((p for p in self.env_prefixes if name.startswith(p.prefix)), None)

    def env_allowed(self, name: str) -> bool:
        return self.knows_env(name) or self.env_prefix(name) is not None

    def suggest_env(self, name: str) -> str:
        close = difflib.get_close_matches(name, sorted(self.env_vars), n=2, cutoff=0.8)
        return f"; did you mean {' or '.join(close)}?" if close else ""

    # -- families ---------------------------------------------------------------------------------------------

    def family(self, name: str) -> Family:
        return self.families[name]

    def canonical_speculative_method(self, method: str) -> str:
        """What vLLM turns ``method`` into: every MTP alias (deepseek_mtp, ...) becomes mtp."""
        return "mtp" if method in self.mtp_aliases else method


# ---------------------------------------------------------------------------------------------------------------
# Loading


def versions() -> list[str]:
    """The vLLM versions nvlfleet has facts for, oldest first."""
    root = resources.files("nvlfleet.facts").joinpath(_DATA)
    found = [p.name for p in root.iterdir() if p.is_dir() and p.joinpath("rules.yaml").is_file()]
    return sorted(found, key=lambda v: tuple(int(x) if x.isdigit() else 0 for x in v.split(".")))


@functools.cache
def load(version: str = DEFAULT_VERSION) -> Facts:
    """The facts of vLLM ``version``; raises UnknownVersion when nvlfleet has none."""
    if version not in versions():
        raise UnknownVersion(version)
    folder = resources.files("nvlfleet.facts").joinpath(f"{_DATA}/{version}")
    cli = json.loads(folder.joinpath("cli-flags.json").read_text())
    env = json.loads(folder.joinpath("env-vars.json").read_text())
    raw = json.loads(folder.joinpath("facts.json").read_text())
    copied = {"facts.json": raw, "kv-connectors.json": json.loads(folder.joinpath("kv-connectors.json").read_text())}
    rules = yaml.safe_load(folder.joinpath("rules.yaml").read_text())
    flags = {
        name: Flag(
            name=name,
            dest=str(entry["dest"]),
            takes_value=bool(entry["takes_value"]),
            nargs=None if entry["nargs"] is None else str(entry["nargs"]),
            choices=None if entry["choices"] is None else tuple(str(c) for c in entry["choices"]),
            type=None if entry["type"] is None else str(entry["type"]),
        )
        for name, entry in cli.items()
    }
    aliases = {str(k): str(v) for k, v in rules.get("flagAliases", {}).items()}
    attached = {str(k): str(v) for k, v in rules.get("attachedValueAliases", {}).items()}
    for alias, target in [*aliases.items(), *attached.items()]:
        if target not in flags:
            raise ValueError(f"rules.yaml of vLLM {version}: alias {alias} names unknown flag {target}")
    json_flags = {str(name): _json_flag(str(name), entry, copied) for name, entry in rules.get("jsonFlags", {}).items()}
    for name in json_flags:
        if name not in flags:
            raise ValueError(f"rules.yaml of vLLM {version}: jsonFlags names unknown flag {name}")
    spec = raw["speculative_decoding"]
    env_facts = raw["env_vars"]
    return Facts(
        version=version,
        flags=flags,
        aliases=aliases,
        attached_aliases=attached,
        json_flags=json_flags,
        env_vars=frozenset(str(n) for n in env),
        extra_env_vars=frozenset(str(n) for n in env_facts.get("read_via_os_environ_but_not_in_vllm_envs", [])),
        removed_env_vars={str(k): str(v) for k, v in env_facts.get("do_not_exist_use_flags_instead", {}).items()},
        env_prefixes=tuple(EnvPrefix(str(p["prefix"]), str(p["reason"])) for p in rules.get("envPrefixes", [])),
        speculative_methods=frozenset(str(m) for m in spec["valid_methods"]),
        mtp_aliases=frozenset(str(m) for m in spec["mtp_aliases_rewritten_to_mtp_with_deprecation_warning"]),
        all2all_backends=frozenset(flags["--all2all-backend"].choices or ()),
        moe_backends=frozenset(flags["--moe-backend"].choices or ()),
        kv_cache_dtypes=frozenset(str(d) for d in raw["performance"]["kv_cache_dtype_literal"]),
        cudagraph_modes=frozenset(str(m) for m in raw["performance"]["cudagraph_modes"]),
        families={name: _family(name, entry) for name, entry in rules.get("families", {}).items()},
        settings={
            str(k): SettingInfo(label=str(v["label"]), path=str(v["path"])) for k, v in rules["settings"].items()
        },
        rules=tuple(_rule(entry) for entry in rules.get("rules", [])),
        raw=raw,
    )


def _json_flag(name: str, entry: Mapping[str, Any], copied: Mapping[str, Any]) -> JsonFlag:
    """One ``jsonFlags`` entry, its keys read from the copied reference file it points into."""
    source = str(entry.get("source", ""))
    rejected = {str(k): str(v) for k, v in (entry.get("rejected") or {}).items()}
    if "freeForm" in entry:
        return JsonFlag(flag=name, keys=None, complete=True, rejected=rejected, source=source)
    if "knownKeys" in entry:
        known = frozenset(str(k) for k in entry["knownKeys"])
        return JsonFlag(flag=name, keys=known, complete=False, rejected=rejected, source=source)
    file, _, path = str(entry["keysFrom"]).partition(":")
    found: Any = copied[file]
    for part in path.split("."):
        found = found[part]
    if not isinstance(found, list | dict) or not found:
        raise ValueError(f"jsonFlags {name}: {entry['keysFrom']} is not a list or mapping of keys")
    return JsonFlag(flag=name, keys=frozenset(str(k) for k in found), complete=True, rejected=rejected, source=source)


def _family(name: str, entry: Mapping[str, Any]) -> Family:
    backends = entry.get("attentionBackends")
    return Family(
        name=name,
        title=str(entry["title"]),
        model_pattern=str(entry["modelPattern"]),
        speculative_methods=tuple(str(m) for m in entry["speculativeMethods"]),
        speculative_source=str(entry.get("speculativeSource", "")),
        attention_backends=None if backends is None else tuple(str(b) for b in backends),
        routed_experts=tuple(
            ExpertCount(pattern=str(c["model"]), experts=int(c["experts"]), source=str(c["source"]))
            for c in entry.get("routedExperts", [])
        ),
    )


def _rule(entry: Mapping[str, Any]) -> Rule:
    rule_id = str(entry["id"])
    severity = str(entry.get("severity", "error"))
    if severity not in ("error", "warning"):
        raise ValueError(f"rule {rule_id}: severity must be error or warning, not {severity}")
    for key in ("message", "reason", "source"):
        if not entry.get(key):
            raise ValueError(f"rule {rule_id}: {key} is required")
    return Rule(
        id=rule_id,
        severity="error" if severity == "error" else "warning",
        when={str(k): _matcher(rule_id, v) for k, v in entry.get("when", {}).items()},
        require={str(k): _matcher(rule_id, v) for k, v in (entry.get("require") or {}).items()},
        check=None if entry.get("check") is None else str(entry["check"]),
        message=str(entry["message"]),
        reason=str(entry["reason"]),
        source=str(entry["source"]),
    )


def _matcher(rule_id: str, spec: Any) -> Matcher:
    if isinstance(spec, list):
        return Matcher("any", tuple(_scalar(rule_id, v) for v in spec))
    if isinstance(spec, dict):
        if len(spec) != 1:
            raise ValueError(f"rule {rule_id}: a matcher has exactly one of min, max, notIn, set: {spec}")
        ((op, arg),) = spec.items()
        if op in ("min", "max"):
            if isinstance(arg, bool) or not isinstance(arg, int | float):
                raise ValueError(f"rule {rule_id}: {op} needs a number, not {arg!r}")
            return Matcher("min" if op == "min" else "max", (arg,))
        if op == "notIn" and isinstance(arg, list):
            return Matcher("not_in", tuple(_scalar(rule_id, v) for v in arg))
        if op == "set" and isinstance(arg, bool):
            return Matcher("set", (arg,))
        raise ValueError(f"rule {rule_id}: unknown matcher {spec}")
    return Matcher("equal", (_scalar(rule_id, spec),))


def _scalar(rule_id: str, value: Any) -> Scalar:
    if value is None or isinstance(value, str | int | float | bool):
        return value
    raise ValueError(f"rule {rule_id}: {value!r} is not a scalar")


# ---------------------------------------------------------------------------------------------------------------
# Argument-reading helpers

_NEGATIVE_NUMBER = re.compile(r"^-\d+(\.\d+)?$")
_HUMAN_INT = re.compile(r"^\d+(\.\d+)?[kKmMgGtT]?$")


def _is_option(token: str) -> bool:
    # argparse treats "-5" as a value when the parser has no numeric-looking options, and so do we.
    return token.startswith("-") and len(token) > 1 and not _NEGATIVE_NUMBER.match(token)


def _dashed(spelling: str) -> str:
    """A long option as vLLM's FlexibleArgumentParser hands it to argparse: ``_`` becomes ``-`` in the name.

    ``vllm serve`` reads its argv with FlexibleArgumentParser (vllm/utils/argparse_utils.py), which rewrites
    every ``--`` token's name up to the first ``.`` before argparse sees it, so ``--kv_transfer_config`` is
    ``--kv-transfer-config`` and ``--no_async_scheduling`` is ``--no-async-scheduling``. Short aliases
    (``-tp``) are left alone, and so is what follows a ``.`` (``--compilation-config.cudagraph_mode``).
    """
    if not spelling.startswith("--"):
        return spelling
    name, dot, rest = spelling[2:].partition(".")
    return "--" + name.replace("_", "-") + dot + rest


def _split_attached(token: str) -> tuple[str, str | None]:
    if "=" in token:
        name, value = token.split("=", 1)
        return name, value
    return token, None


def _value_problem(spelling: str, flag: Flag, values: Sequence[str]) -> str | None:
    if flag.nargs in (None, "?") and len(values) > 1:
        return f"{spelling} takes one value, got {len(values)}"
    for value in values:
        if flag.choices is not None and value not in flag.choices:
            return f"{spelling} {value!r} is not one of: {', '.join(flag.choices)}"
        kind = _type_problem(flag.type, value)
        if kind:
            return f"{spelling} expects {kind}, got {value!r}"
    return None


def _type_problem(kind: str | None, value: str) -> str | None:
    """What ``value`` should have been for argparse type ``kind`` (None when it parses)."""
    if kind == "int":
        return None if re.fullmatch(r"-?\d+", value) else "an integer"
    if kind == "float":
        try:
            float(value)
        except ValueError:
            return "a number"
        return None
    if kind == "human_readable_int":
        return None if _HUMAN_INT.match(value) else "an integer such as 8192 or 8k"
    if kind == "human_readable_int_or_auto":
        return None if value in ("auto", "-1") or _HUMAN_INT.match(value) else "an integer such as 131072 or 128k"
    if kind in ("loads", "parse_dataclass"):
        try:
            parsed = json.loads(value)
        except ValueError:
            return "JSON" if kind == "loads" else "a JSON object"
        if kind == "parse_dataclass" and not isinstance(parsed, dict):
            return "a JSON object"
    return None
