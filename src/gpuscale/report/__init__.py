"""Rendering results for people: terminal tables, JSON, HTML."""
