"""Every check of a cache, in one package: what each reader runs, and what ``destila cache verify`` adds.

Cheap enough for every reader (``inspect``, ``train``, ``eval`` run them too):

- :mod:`.manifest`: the manifest agrees with itself, and its shards cover
  every sequence exactly once (no file is read);
- :mod:`.identity`: the cache's identity, recorded in the manifest and
  carried by every shard, so a shard from another cache is refused;
- :mod:`.shards`: a shard opened only after its size, SHA-256, schema and
  identity are the manifest's, and its sequence order checked
  (:class:`~.shards.CorruptShardError`);
- :mod:`.rows`: the values a reader decodes are log-probabilities and ids
  within the vocabulary; and every rule of a stored row (by its kind and
  encoding) that ``verify`` applies.

What needs every row or the cache's own files, run by ``destila cache verify``:

- :mod:`.derived`: the manifest fields the cache's own files decide
  (tokenizer, layout, ``ids_fingerprint``), computed again;
- :mod:`.verify`: :func:`~.verify.verify_cache`, every check above over every
  shard and row, into a :class:`~.rows.VerifyReport`;
- :mod:`.export`: the same for an export (``destila cache export``): its
  record, files, rows and content digest.

The public names (``CorruptShardError``, ``VerifyReport``, ``verify_cache``)
are imported from :mod:`destila.cache`. This ``__init__`` imports nothing, so
that the cache's lower modules (the writer records the identity) can use one
check without loading them all.
"""
