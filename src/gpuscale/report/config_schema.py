"""The configuration file's JSON Schema (draft 2020-12), made from the pydantic model the file is read with
(`config.ConfigFile`): what `gpuscale config schema` prints and `docs/config.schema.json` holds, so editors — the YAML
language server in VS Code, Neovim or Helix, IntelliJ — complete option names and flag misspelt keys and wrong types
while the file is written. The schema checks each value's shape; the checks across settings (min above max, a buffer
for an unknown pool, a GPU type no pool has) are `gpuscale config validate`'s, the same as `run`'s.
"""

from __future__ import annotations

import json
from typing import Any

from gpuscale.config import ConfigFile

DIALECT = "https://json-schema.org/draft/2020-12/schema"
TITLE = "gpuscale configuration"
DESCRIPTION = ("Pools and autoscaling options of gpuscale, a GPU-aware Kubernetes cluster autoscaler; option names are "
               "Cluster Autoscaler's flags in snake_case. Only pools is required; an option left out keeps its default "
               "(docs/config.md lists each, with CA's default and flag).")


def _tidy(node: Any) -> Any:
    """Drop `"default": null` (null means "not given", which the description says; editors would show it as the
    default) and the generated `title`s that only repeat the key; keep everything else as pydantic made it."""
    if isinstance(node, dict):
        return {k: _tidy(v) for k, v in node.items()
                if not (k == "default" and v is None) and not (k == "title" and isinstance(v, str))}
    if isinstance(node, list):
        return [_tidy(v) for v in node]
    return node


def config_schema() -> dict[str, Any]:
    """The JSON Schema of a gpuscale configuration file."""
    schema = _tidy(ConfigFile.model_json_schema())
    priorities = schema["properties"]["priorities"]["anyOf"][0]
    priorities["propertyNames"] = {"pattern": "^-?[0-9]+$"}  # YAML integer keys; JSON object keys are strings
    return {"$schema": DIALECT, "title": TITLE, "description": DESCRIPTION,
            **{k: v for k, v in schema.items() if k != "description"}}


def schema_text() -> str:
    """The schema as written to docs/config.schema.json: two-space indent, keys in the model's order."""
    return json.dumps(config_schema(), indent=2, ensure_ascii=False) + "\n"
