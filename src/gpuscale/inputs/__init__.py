"""Reading what users hand gpuscale, at the edge and within limits (docs/cli.md, "Input limits").

`files` reads at most a size limit of text, `yaml12` reads YAML as YAML 1.2's core schema does with nesting and
alias-expansion budgets, `jsonread` reads JSON with the same nesting limit, `strict` makes pydantic models take
integers, booleans and numbers only as what they are. Every refusal is an `InputError` or `ConfigError`: one line.
"""
