"""Command-line flags → dataclass configs (draccus), with errors in the command line's own words: a bad flag is one
FlagError line (the flag as typed, what was wrong, where the flags are listed), and `--help` is hfpolicy's own."""

import argparse
import dataclasses
import difflib
import enum
import functools
import inspect
import re
import shutil
import sys
import textwrap
import types
import typing
from pathlib import Path
from typing import Any

import draccus
from draccus.utils import DecodingError, DraccusException
from draccus.wrappers.docstring import get_attribute_docstring

from hfpolicy.cli.lerobot_flags import describe_lerobot_flags, is_accepted_lerobot_flag
from hfpolicy.field_errors import ConfigFieldError, value_words


class FlagError(ValueError):
    """A command-line flag that does not exist or cannot be parsed."""


def parse_flags(config_class: type, argv: list[str], prog: str, config_path: str | Path | None = None):
    """draccus.parse with FlagError instead of a usage dump and SystemExit; `--help` prints `format_help` and exits."""
    if any(arg in HELP_FLAGS for arg in argv):
        sys.stdout.write(format_help(config_class, argv, prog))
        sys.stdout.flush()
        raise SystemExit(0)
    argv = without_accepted_lerobot_flags(config_class, argv)
    try:
        return draccus.parse(config_class, config_path=config_path, args=argv, prog=prog, exit_on_error=False)
    except (DraccusException, argparse.ArgumentError) as e:
        raise FlagError(describe_flag_error(e, prog, config_class, argv)) from e


def without_accepted_lerobot_flags(config_class: type, argv: list[str]) -> list[str]:
    """`argv` without the LeRobot flags it does not take whose value changes nothing (`--policy.push_to_hub=false`)."""
    accepted = [arg for arg in argv if arg.startswith("--") and is_accepted_lerobot_flag(arg)]
    if not accepted:
        return argv
    known = set(known_flags(config_class, argv))
    return [arg for arg in argv if arg not in accepted or arg.split("=", 1)[0] in known]


def describe_flag_error(error: BaseException, prog: str, config_class: type, argv: list[str]) -> str:
    """draccus's error in the command line's words: a config's own check in flags, a value that does not parse as
    `--steps: couldn't parse 'abc' ...`, an unknown flag with the closest known ones (or LeRobot's equivalent)."""
    cause = error.__cause__
    if isinstance(cause, ConfigFieldError):
        prefix = config_prefix(config_class, type(cause.config))
        if prefix is not None:
            return cause.flags(prefix)
    unknown = unknown_flags(config_class, argv)
    lerobot = describe_lerobot_flags(unknown)
    if lerobot:  # LeRobot's habits, whichever way draccus reported them (unknown argument, field of no config)
        return f"unrecognized arguments: {' '.join(unknown)}; {lerobot}; `{prog} --help` lists the flags"
    if isinstance(error, DecodingError) and error.key_path:
        message = f"--{'.'.join(error.key_path)}: {optional_value_words(error.message)}"
    elif isinstance(error, argparse.ArgumentError) and error.argument_name:
        message = f"{error.argument_name}: {error.message}"
    else:
        message = str(error).strip()
        if unknown:
            message = f"unrecognized arguments: {' '.join(unknown)}{did_you_mean(config_class, unknown, argv)}"
    message = message.splitlines()[0]
    if cause is not None and str(cause) and str(cause) not in message and not message.endswith(", or null"):
        message += f" ({str(cause).splitlines()[0]})"
    return f"{message}; `{prog} --help` lists the flags"


def optional_value_words(message: str) -> str:
    """draccus's several-line error for an optional flag as "Couldn't parse 'x' into a float, or null"."""
    if not message.startswith("Could not decode the value into any of the given types"):
        return message
    found = re.search(r"Couldn't parse .*", message)
    return f"{found.group(0).strip()}, or null" if found else message


def config_prefix(config_class: type, target: type, prefix: str = "") -> str | None:
    """The flag prefix ("policy.") of the config class `target` inside `config_class` ("" for itself), if any."""
    if config_class is target:
        return prefix
    for name, candidates in _nested_configs(config_class):
        for candidate in candidates:
            found = config_prefix(candidate, target, f"{prefix}{name}.")
            if found is not None:
                return found
    return None


def _nested_configs(config_class: type) -> list[tuple[str, list[type]]]:
    """[(field name, the config classes it can hold)] for the dataclass fields of `config_class`."""
    if not dataclasses.is_dataclass(config_class):
        return []
    hints = typing.get_type_hints(config_class)
    nested = []
    for f in dataclasses.fields(config_class):
        annotation = hints[f.name]
        if isinstance(annotation, type) and dataclasses.is_dataclass(annotation):
            candidates = [annotation]
            if issubclass(annotation, draccus.ChoiceRegistry):
                candidates += list(annotation.get_known_choices().values())
            nested.append((f.name, candidates))
    return nested


def known_flags(config_class: type, argv: list[str]) -> list[str]:
    """Every flag `config_class` takes, as `--help` lists them."""
    flags = ["--config_path"]
    for _, rows in help_sections(config_class, argv, ""):
        flags += [flag for flag, _, _ in rows]
    return flags


def unknown_flags(config_class: type, argv: list[str]) -> list[str]:
    """The `--name[=value]` arguments of `argv` that `config_class` does not take."""
    known = set(known_flags(config_class, argv))
    return [arg for arg in argv if arg.startswith("--") and arg.split("=", 1)[0] not in known]


def did_you_mean(config_class: type, unknown: list[str], argv: list[str]) -> str:
    """ " (did you mean --steps?)" for the known flags closest to the unknown ones (difflib), or ""."""
    known = known_flags(config_class, argv)
    close = []
    for arg in unknown:
        close += [m for m in difflib.get_close_matches(arg.split("=", 1)[0], known, n=2, cutoff=0.75) if m not in close]
    return f" (did you mean {' or '.join(close)}?)" if close else ""


def error_in_flags(error: Exception, config_class: type, prefix: str = "") -> str:
    """A config's error in the command line's words (a ConfigFieldError's fields of `config_class` as flags)."""
    if isinstance(error, ConfigFieldError):
        return error.flags(prefix, only={f.name for f in dataclasses.fields(config_class)})
    return str(error)


# --- help: written from the config dataclasses, each flag with its type, default and doc comment -----------------
HELP_FLAGS = ("-h", "--help")
_DIVIDER = re.compile(r"^\s*#?\s*-{3,}")  # `# --- section ---` lines are dividers, not documentation


def field_docs(config_class: type) -> dict[str, str]:
    """{field name: its doc comment} for a dataclass and its dataclass bases (a subclass's own comment wins)."""
    docs: dict[str, str] = {}
    for cls in reversed(config_class.__mro__):
        if dataclasses.is_dataclass(cls):
            docs.update({name: doc for name, doc in _own_field_docs(cls).items() if doc})
    return docs


@functools.cache
def _own_field_docs(cls: type) -> dict[str, str]:
    """{field: doc} for the fields `cls` itself declares: the comment beside it, a docstring under it, and the comment
    lines right below it, up to a `# --- section ---` divider."""
    own = [
        name for name in cls.__dict__.get("__annotations__", {}) if name in {f.name for f in dataclasses.fields(cls)}
    ]
    found = {name: get_attribute_docstring(cls, name) for name in own}
    docs = {}
    for name, after in zip(own, [*own[1:], None][: len(own)], strict=True):
        parts = [found[name].comment_inline, found[name].docstring_below]
        if after is not None:
            for line in found[after].comment_above.splitlines():
                if _DIVIDER.match(line):
                    break
                parts.append(line.strip())
        docs[name] = " ".join(" ".join(part.split()) for part in parts if part and not _DIVIDER.match(part))
    return docs


def _type_words(annotation: Any) -> tuple[str, bool]:
    """(how the command line writes a value of this type, whether null is allowed)."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        inner = [arg for arg in args if arg is not type(None)]
        words, _ = _type_words(inner[0]) if len(inner) == 1 else ("|".join(_type_words(a)[0] for a in inner), False)
        return words, type(None) in args
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return "{" + ",".join(str(member.value) for member in annotation) + "}", False
    if origin in (list, tuple, set):
        if origin is tuple and args and args[-1] is not Ellipsis:
            return "'[" + ",".join(_type_words(arg)[0] for arg in args) + "]'", False
        item = _type_words(args[0])[0] if args else "value"
        return f"'[{item},...]'", False
    if origin is dict or annotation is dict:
        return "'{key: value,...}'", False
    if annotation is Path:
        return "path", False
    return getattr(annotation, "__name__", str(annotation)), False


def _field_default(f: dataclasses.Field) -> Any:
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return f.default


def _chosen_type(flag: str, argv: list[str]) -> str | None:
    """The value given to `flag` (`--policy.type=x` or `--policy.type x`), if any."""
    for i, arg in enumerate(argv):
        if arg.startswith(f"{flag}="):
            return arg.split("=", 1)[1]
        if arg == flag and i + 1 < len(argv):
            return argv[i + 1]
    return None


def help_sections(config_class: type, argv: list[str], prog: str) -> list[tuple[str, list[tuple[str, str, str]]]]:
    """[(section title, [(flag, type words, help)])] for every leaf field of `config_class`; a choice field
    (`--policy.type`) lists the chosen type's fields only."""
    sections: list[tuple[str, list[tuple[str, str, str]]]] = []

    def visit(cls: type, prefix: str, title: str, instance: Any) -> None:
        rows: list[tuple[str, str, str]] = []
        sections.append((title, rows))
        docs = field_docs(cls)
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):  # (a nested config's section follows this one: `rows` fills in place)
            if not f.init:
                continue
            name, annotation = f.name, hints[f.name]
            flag = f"--{prefix}{name}"
            default = getattr(instance, name) if instance is not None else _field_default(f)
            doc = cli_words(docs.get(name, ""))
            if isinstance(annotation, type) and issubclass(annotation, draccus.ChoiceRegistry):
                choices = annotation.get_known_choices()
                default_name = annotation.get_choice_name(type(default)) if default is not None else None
                chosen = _chosen_type(f"{flag}.type", argv) or default_name
                chosen_class = choices.get(chosen or "", type(default))
                others = [choice for choice in choices if choice != chosen]
                title = f"{flag}.*: {_summary(chosen_class) or doc} ({flag}.type={chosen})"
                if others:
                    title += f"; `{prog} {flag}.type={others[0]} --help` lists {others[0]}'s flags"
                type_doc = f"which {name} ({', '.join(choices)}; default: {default_name})"
                chosen_default = default if type(default) is chosen_class else chosen_class()
                visit(chosen_class, f"{prefix}{name}.", title, chosen_default)
                sections[-1][1].insert(0, (f"{flag}.type", "{" + ",".join(choices) + "}", type_doc))
            elif isinstance(annotation, type) and dataclasses.is_dataclass(annotation):
                visit(annotation, f"{prefix}{name}.", f"{flag}.*: {_summary(annotation) or doc}", default)
            else:
                words, nullable = _type_words(annotation)
                if default is not dataclasses.MISSING and not re.search(r"\bdefault\b|\brequired\b", doc):
                    doc = f"{doc} (default: {value_words(default)})".strip()
                if nullable and default is not None and "null" not in doc:
                    doc += "; null to unset"
                rows.append((flag, words, doc))

    visit(config_class, "", "", None)
    return [(title, rows) for title, rows in sections if rows]


def _summary(cls: type) -> str:
    """The first sentence of a class's docstring, without its final period."""
    doc = " ".join((inspect.getdoc(cls) or "").split())
    sentence = re.split(r"(?<=\.)\s", doc, maxsplit=1)[0].rstrip(".:")
    return sentence.split(": ", 1)[0] if len(sentence) > 70 else sentence


def cli_words(text: str) -> str:
    """Python's None/True/False as the command line writes them (null/true/false)."""
    words = {"None": "null", "True": "true", "False": "false"}
    return re.sub(r"\b(None|True|False)\b", lambda m: words[m.group(1)], text)


def format_help(config_class: type, argv: list[str], prog: str) -> str:
    """The text of `<prog> --help`."""
    width = max(80, min(120, shutil.get_terminal_size((100, 24)).columns))
    out = [f"usage: {prog} [--flag=value ...]", ""]
    summary = (inspect.getdoc(config_class) or "").strip()
    if summary:
        out += [textwrap.fill(" ".join(summary.split()), width), ""]
    out += [
        "Flags are written --name=value (nested ones --group.name=value); lists as '[1,2]', null for none.",
        "",
        "options:",
        _format_row("-h, --help", "", "print this help and exit", width),
        _format_row("--config_path", "path", "a JSON or YAML file of values to start from; flags override it", width),
    ]
    for title, rows in help_sections(config_class, argv, prog):
        out.append("")
        if title:
            out.append(title + ":")
        out += [_format_row(flag, words, doc, width) for flag, words, doc in rows]
    return "\n".join(out) + "\n"


def _format_row(flag: str, words: str, doc: str, width: int) -> str:
    left = f"  {flag} {words}".rstrip()
    column = 34
    if len(left) + 2 > column:
        return left + "\n" + textwrap.fill(doc, width, initial_indent=" " * column, subsequent_indent=" " * column)
    return textwrap.fill(doc, width, initial_indent=left.ljust(column), subsequent_indent=" " * column)
