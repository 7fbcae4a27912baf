"""What each command does, options in and a result out, nothing printed (issue 24 §1): the
functions behind the API's faces (:mod:`llmpar.api`) and the CLI's commands (docs/architecture.md,
floors). ``memory`` for `llmpar memory`, ``step`` for `llmpar step`, ``collective`` for
`llmpar collective`; the planner's, calibration's and serving's live in their own packages.
"""
