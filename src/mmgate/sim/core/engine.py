"""A pure, clock-free, step-driven model of a vLLM V1 engine serving a multimodal model.

The caller owns time. ``preprocess(request, now)`` says how long the frontend takes before the
request can enter the scheduler; ``add_request(request, now)`` enqueues it; each ``step(now)``
schedules one batch like vLLM's V1 scheduler (:mod:`mmgate.sim.core.scheduler`) and returns
how long it runs and which requests got tokens. The HTTP simulator and the discrete-event
benchmark drive the same object, one with a real clock and one with a virtual one.

Step time = encoder time of the items encoded (their sum, or with ``--mm-encoder-tp-mode data``
the busiest GPU's share, :mod:`mmgate.sim.core.encoder`) + the LM forward (see
:class:`mmgate.sim.profiles.StepTiming`). A request whose prefill completes samples its first
token at the end of the step.

Cost: block keys are hashed once, at admission (decode blocks as they fill); a decoding request
costs nothing per step except at block boundaries and at its end (an event queue keyed by step
number, :mod:`mmgate.sim.core.decode`), so a step is O(changes), not O(tokens) or O(running).
"""

from __future__ import annotations

from pathlib import Path

from mmgate.modelserver.stats import EngineStats
from mmgate.sim.core.encoder import EncoderStage
from mmgate.sim.core.frontend import Frontend
from mmgate.sim.core.kv import BlockPool
from mmgate.sim.core.prefix import PrefixCache
from mmgate.sim.core.request import RequestState
from mmgate.sim.core.scheduler import Scheduler
from mmgate.sim.core.timing import Noise, lm_ms, prefill_chunk_ms
from mmgate.sim.core.types import EngineConfig, SimRequest, StepOutput
from mmgate.sim.profiles import Profile, load_profile
from mmgate.vllm.blocks import BlockHash, BlockHasher


class Engine:
    """One simulated vLLM engine (one pod). See the module docstring for the model."""

    def __init__(self, profile: Profile | str | Path, config: EngineConfig | None = None) -> None:
        self.profile = profile if isinstance(profile, Profile) else load_profile(profile)
        cfg = config or EngineConfig()
        d = self.profile.engine
        self.block_size = cfg.block_size or d.block_size
        self.num_gpu_blocks = cfg.num_gpu_blocks or self.profile.num_gpu_blocks(self.block_size)
        self.max_num_batched_tokens = cfg.max_num_batched_tokens or d.max_num_batched_tokens
        self.max_num_seqs = cfg.max_num_seqs or d.max_num_seqs
        self.max_model_len = cfg.max_model_len or d.max_model_len
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise ValueError(
                f"max_num_batched_tokens ({self.max_num_batched_tokens}) must be >= "
                f"max_num_seqs ({self.max_num_seqs}), as vLLM requires"
            )
        self.config = cfg
        self.enable_prefix_caching = cfg.enable_prefix_caching
        hasher = BlockHasher(
            cfg.prefix_caching_hash_algo, self.block_size, cfg.hash_seed, cfg.block_key_format
        )
        pool = BlockPool(self.num_gpu_blocks, cfg.kv_events)
        self._prefix = PrefixCache(pool, hasher, cfg.enable_prefix_caching, cfg.output_token_id)
        encoder, lanes = self.profile.encoder_for(cfg.mm_encoder_tp_mode, cfg.tensor_parallel_size)
        self.encoder_lanes = lanes
        self._encoder = EncoderStage(
            encoder,
            cfg.encoder_cache_tokens,
            self.max_num_batched_tokens,
            cfg.encoder_budget_tokens or self.max_num_batched_tokens,
            cfg.disable_chunked_mm_input,
            lanes,
            self.profile.modality_encoders(),
        )
        self._noise = Noise(self.profile.noise.relative_sd if cfg.noise is None else cfg.noise, cfg.seed)
        self._frontend = Frontend(
            self.profile.preprocess,
            self.profile.media_load,
            cfg.mm_processor_cache_gb,
            cfg.preprocess_workers,
            self._noise,
            {m: self.profile.preprocess_for(m) for m in self.profile.modalities},
            load_threads=cfg.media_loading_threads,
            loads=self.profile.modality_loads(),
        )
        self._timing = self.profile.step
        self._scheduler = Scheduler(
            self._prefix,
            self._encoder,
            self.max_num_batched_tokens,
            self.max_num_seqs,
            self._timing.decode_ms_per_max_context_token != 0.0,
        )

    @property
    def hasher(self) -> BlockHasher:
        """The block-key hasher (replaceable, e.g. by a memoizing wrapper in the DES)."""
        return self._prefix.hasher

    @hasher.setter
    def hasher(self, value: BlockHasher) -> None:
        self._prefix.hasher = value

    def preprocess(self, request: SimRequest, now: float) -> float:
        """Seconds from ``now`` until ``request`` has been preprocessed and may be added
        (:meth:`mmgate.sim.core.frontend.Frontend.preprocess`)."""
        return self._frontend.preprocess(request, now)

    def add_request(self, request: SimRequest, now: float) -> None:
        """Enqueue a (preprocessed) request. Raises ValueError for a malformed request or one
        that could never fit this engine (then nothing is enqueued)."""
        rid = request.request_id
        if rid in self._scheduler.requests:
            raise ValueError(f"request {rid!r} is already in the engine")
        if request.max_tokens < 1:
            raise ValueError("max_tokens must be at least 1")
        n = len(request.token_ids)
        if n < 1:
            raise ValueError("a request needs at least one prompt token")
        total = n + request.max_tokens
        if total > self.max_model_len:
            raise ValueError(f"prompt + max_tokens = {total} exceeds max_model_len {self.max_model_len}")
        need = -(-total // self.block_size)
        if need > self.num_gpu_blocks - 1:
            raise ValueError(f"request needs {need} KV blocks; the engine has {self.num_gpu_blocks - 1}")
        enc_keys, enc_ms = self._encoder.register(request)
        r = RequestState(request, enc_keys, enc_ms)
        self._prefix.hash_prompt(r)
        self._scheduler.enqueue(r)

    def abort(self, request_id: str) -> bool:
        """Drop a request wherever it is (client gone). False if the engine does not know it."""
        return self._scheduler.abort(request_id)

    def has_work(self) -> bool:
        return bool(self._scheduler.waiting or self._scheduler.running)

    def num_requests(self) -> int:
        return len(self._scheduler.requests)

    def reset_prefix_cache(self) -> bool:
        """Forget every cached block (vLLM's ``/reset_prefix_cache``); only when none is in use."""
        return self._prefix.pool.reset()

    def is_cached(self, block_hash: BlockHash) -> bool:
        return self._prefix.pool.is_cached(block_hash)

    def stats(self) -> EngineStats:
        sched = self._scheduler
        prefix = self._prefix
        enc = self._encoder
        return EngineStats(
            num_running=len(sched.running),
            num_waiting=len(sched.waiting),
            kv_cache_usage=prefix.pool.usage(),
            prefix_cache_queries=prefix.queries,
            prefix_cache_hits=prefix.hits,
            encoder_cache_queries=enc.queries,
            encoder_cache_hits=enc.hits,
            processor_cache_queries=self._frontend.queries,
            processor_cache_hits=self._frontend.hits,
            num_gpu_blocks=self.num_gpu_blocks,
            block_size=self.block_size,
            num_preemptions=sched.preemptions,
            encoder_cache_used_tokens=enc.cache.used(),
            encoder_cache_capacity_tokens=enc.cache.capacity,
            prompt_tokens=sched.prompt_tokens,
            generation_tokens=sched.generation_tokens,
        )

    def step(self, now: float) -> StepOutput:
        """Schedule and run one batch starting at ``now``; see the module docstring."""
        out = StepOutput()
        sched = self._scheduler
        batch = sched.schedule(out)
        n_dec = batch.n_dec
        if not batch.chunks and n_dec == 0:
            out.events = self._prefix.pool.take_events()
            return out

        t = self._timing
        prefill_ms = 0.0
        for _r, start, n in batch.chunks:
            prefill_ms += prefill_chunk_ms(t, start, n)
        decode = sched.decode
        s1 = batch.step + 1
        ctx_sum = n_dec * s1 + decode.offset_sum
        max_ctx = s1 + decode.max_offset() if n_dec and decode.track_max else None
        encode_ms = self._encoder.step_ms(batch.encode_ms, batch.encode_items_ms or [])
        total_ms = encode_ms + lm_ms(t, prefill_ms, bool(batch.chunks), n_dec, ctx_sum, max_ctx)
        noise = self._noise
        if noise.sd:
            f = noise.factor()
            total_ms *= f
            encode_ms *= f
        out.duration = total_ms / 1000.0
        out.encoder_seconds = encode_ms / 1000.0
        out.encoded_items = batch.encoded
        out.decode_seqs = n_dec

        sched.complete(batch, out)
        out.events = self._prefix.pool.take_events()
        return out
