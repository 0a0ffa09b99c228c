"""Config files with known mistakes, shared by the tests of the commands that read configs."""

from __future__ import annotations

# Three mistakes of three kinds, at lines 6, 12 and 14: a misspelt parameter (shape), a reference
# to a plugin not defined (meaning), a value out of range (the mmgate section).
THREE_MISTAKES = """\
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: prefix-cache-affinity-filter
  parameters:
    afinityThreshold: 0.6
- type: token-load-scorer
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: prefix-cache-affinity-filter
  - pluginRef: token-load-scorr
mmgate:
  port: 99999
"""
