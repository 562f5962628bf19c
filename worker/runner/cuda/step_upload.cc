#include "worker/runner/cuda/step_upload.h"

#include "absl/strings/str_cat.h"

namespace llm::runner::cuda {

size_t SpecLimitOffset(size_t bucket_slots) { return AlignUpload(bucket_slots * sizeof(int32_t)); }

absl::StatusOr<UploadOffsets> StageUpload(const StepLayout& l, Staging& staging) {
  UploadOffsets o;
  o.draft = staging.Put(l.decode_draft);
  o.limit = staging.Put(l.decode_limit);
  o.admits = staging.Put(l.admits);
  o.settings = staging.Put(l.settings);
  o.grants = staging.Put(l.grants);
  o.blocks = staging.Put(l.blocks);
  o.rows = staging.Put(l.row_changes);
  o.pslot = staging.Put(l.prefill_slot);
  o.ppos = staging.Put(l.prefill_pos);
  o.ptoken = staging.Put(l.prefill_token);
  o.chunks = staging.Put(l.prefill_chunks);
  o.tiles = staging.Put(l.prefill_tiles);
  o.last_tiles = staging.Put(l.last_token_tiles);
  o.samples = staging.Put(l.sample_rows);
  o.spans = staging.Put(l.history_spans);
  o.history = staging.Put(l.history_tokens);
  for (int64_t off :
       {o.admits, o.settings, o.grants, o.blocks, o.rows, o.pslot, o.ppos, o.ptoken, o.chunks,
        o.tiles, o.last_tiles, o.samples, o.draft, o.limit, o.spans, o.history}) {
    if (off < 0) return absl::InternalError("Launch: the step's upload overflows its staging");
  }
  if (l.group > 1 &&
      (o.draft != 0 || o.limit != static_cast<int64_t>(SpecLimitOffset(l.decode_draft.size())))) {
    return absl::InternalError(absl::StrCat(
        "Launch: a speculative step's allowances and limits are not where its graph reads them (",
        o.draft, ", ", o.limit, ")"));
  }
  return o;
}

ForwardShape ShapeOf(const StepLayout& l, const UploadOffsets& o, const std::byte* upload) {
  ForwardShape shape;
  shape.rows = l.rows;
  shape.prefill_rows = l.prefill_rows;
  shape.decode_rows = l.decode_rows;
  shape.sample_rows = l.num_sample_rows;
  shape.identity_sampling = l.identity_sampling;
  shape.argmax_only = l.argmax_only;
  shape.group = l.group;
  shape.draft_catch_up = l.draft_catch_up;
  auto at = [&](int64_t off) { return upload + off; };
  shape.prefill_slot = reinterpret_cast<const int32_t*>(at(o.pslot));
  shape.prefill_pos = reinterpret_cast<const int32_t*>(at(o.ppos));
  shape.prefill_token = reinterpret_cast<const int32_t*>(at(o.ptoken));
  shape.prefill_chunks = reinterpret_cast<const kernels::PrefillChunk*>(at(o.chunks));
  shape.prefill_tiles = reinterpret_cast<const kernels::PrefillTile*>(at(o.tiles));
  shape.num_prefill_tiles = static_cast<int32_t>(l.prefill_tiles.size());
  shape.last_token_tiles = reinterpret_cast<const kernels::PrefillTile*>(at(o.last_tiles));
  shape.num_last_token_tiles = static_cast<int32_t>(l.last_token_tiles.size());
  shape.sample_rows_index = reinterpret_cast<const int32_t*>(at(o.samples));
  shape.decode_draft = reinterpret_cast<const int32_t*>(at(o.draft));
  shape.decode_limit = reinterpret_cast<const int32_t*>(at(o.limit));
  return shape;
}

kernels::SlotUpdateParams SlotUpdatesOf(const StepLayout& l, const UploadOffsets& o,
                                        const std::byte* upload) {
  kernels::SlotUpdateParams up{};
  up.admits = reinterpret_cast<const kernels::SlotAdmit*>(upload + o.admits);
  up.settings = reinterpret_cast<const kernels::SlotSampling*>(upload + o.settings);
  up.blocks = reinterpret_cast<const int32_t*>(upload + o.blocks);
  up.row_changes = reinterpret_cast<const int32_t*>(upload + o.rows);
  up.grants = reinterpret_cast<const kernels::SlotGrant*>(upload + o.grants);
  up.num_admits = static_cast<int32_t>(l.admits.size());
  up.num_grants = static_cast<int32_t>(l.grants.size());
  up.num_row_changes = static_cast<int32_t>(l.row_changes.size() / 2);
  return up;
}

}  // namespace llm::runner::cuda
