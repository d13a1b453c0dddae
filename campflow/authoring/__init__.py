"""LLM-authored bootcamps (``campflow author``): an LLM writes a module, the contract judges it in a sandbox.

From a task description (Markdown) and optional examples (JSONL of inputs and answers), a model behind
any OpenAI-compatible endpoint writes a bootcamp module against :mod:`campflow.bootcamps.base`. campflow
runs the contract on it in sandboxed child processes and sends every failure back with its evidence
for a bounded number of repair rounds; an accepted module is stored in the workspace with its source
hash and recorded like an import, a rejected one is kept with its reasons, and every verdict is a row
of the store.

=====================  ===========================================================================
module                 what it does
=====================  ===========================================================================
``prompt``             the system prompt (the interface, the contract, what to return), the task
                       message, the repair message, reading the module out of a reply
``examples``           the examples file (JSONL: ``input``, ``answer``)
``checks``             the contract on one module, run inside the sandbox; the list of checks
``confine``            the sandboxed process: rlimits and an audit hook, then the checks
``sandbox``            starting that process (namespaces, environment, wall clock) and reading it
``contract_run``       one module through two sandboxed processes, as verdicts
``records``            verdicts and attempts in the store, modules in the workspace
``author``             the loop: ask, check, repair, accept or reject (``author_bootcamp``)
=====================  ===========================================================================

This package sits above the store it records into; the sandboxed process imports only ``checks``,
``confine`` and the bootcamp layer below, so this file stays free of imports.
"""
