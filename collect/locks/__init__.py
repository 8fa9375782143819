"""Lock evidence recorded while a run collects: each futex waiter's lock and its owner, the
owners' stacks while they hold it, and the futex wakes that release it.

The glibc lock layouts are read in ``locklayout``, the target's memory and data symbols in
``targetmemory``; ``owners`` samples the waiters, ``holders`` stops an owner for its stack and
``futexwakes`` records the releases.  ``wallflame.fold.locks`` names the waits from them.
"""
