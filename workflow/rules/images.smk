# rules for this stage are added by its issue
