// placeholder: filled in by the issue-2 work
