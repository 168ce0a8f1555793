"""The mount's parts, one concern each, behind the pyfuse3 Operations class that
translates requests (walfs.fuse.operations.WalOperations):

- tree: nodes, inode numbers, names, listings (what the tree shows);
- attributes: the attributes and cache timeouts the kernel is given for a node;
- handles: open files (a writer's held line, a consumer view's reach);
- consumer_files: where a group's view starts and what reading it commits;
- xattrs: the user.walfs.* attributes (figures, watermarks, retention);
- invalidation: what the kernel must forget (sizes, names) and the watcher that finds
  growth made by other faces;
- permissions: the caller's right to write a directory;
- errnos: which errno a walfs error becomes, and the guard around every handler;
- kernel_flags: FUSE_AUTO_INVAL_DATA off (cached pages survive a topic's growth).
"""
