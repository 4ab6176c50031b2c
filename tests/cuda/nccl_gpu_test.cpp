// The NCCL communicator in a one-rank world on the GPU (label gpu; skipped without one): every collective moves or
// reduces CUDA tensors on the context's stream as the one-rank serial computation says (a one-rank reduction is the
// identity; all_gatherv / all_to_allv are the grouped point-to-point forms), the counters count nothing sent to
// other ranks, and ZeRO-1 over it is the plain optimizer path.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "dist/nccl_communicator.h"
#include "dist/zero.h"

using namespace fp8train;
using namespace fp8train::dist;

namespace {

const ExecCtx& gpu() {
  static const ExecCtx ctx = ExecCtx::on(Device::cuda(0));
  return ctx;
}

Tensor on_gpu(const std::vector<float>& v) {
  return Tensor::from_vector(v, {static_cast<int64_t>(v.size())}, MemCategory::Workspace, Device::cuda(0));
}

}  // namespace

TEST(NcclGpu, OneRankWorldCollectives) {
  ASSERT_TRUE(nccl_available());
  std::unique_ptr<Communicator> comm = nccl_world(nccl_unique_id(), 0, 1, CommOptions{.timeout_seconds = 60});
  ASSERT_EQ(comm->size(), 1);
  ASSERT_EQ(comm->backend(), "nccl");
  const std::vector<float> x{1.5f, -2.0f, 3.25f, 0.0f, 7.0f};
  const Tensor send = on_gpu(x);
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min}) {
    const Tensor recv = on_gpu(std::vector<float>(5, -99.0f));
    comm->all_reduce(send, recv, op, gpu());
    gpu().synchronize();
    EXPECT_EQ(recv.to_vector<float>(), x) << reduce_op_name(op);
  }
  Tensor out = on_gpu(std::vector<float>(5, -99.0f));
  comm->reduce_scatter(send, out, ReduceOp::Sum, gpu());
  gpu().synchronize();
  EXPECT_EQ(out.to_vector<float>(), x);
  out = on_gpu(std::vector<float>(5, -99.0f));
  comm->all_gather(send, out, gpu());
  gpu().synchronize();
  EXPECT_EQ(out.to_vector<float>(), x);
  const std::vector<int64_t> counts{5};
  out = on_gpu(std::vector<float>(5, -99.0f));
  comm->all_gatherv(send, out, counts, gpu());
  gpu().synchronize();
  EXPECT_EQ(out.to_vector<float>(), x);
  out = on_gpu(std::vector<float>(5, -99.0f));
  comm->all_to_allv(send, counts, out, counts, gpu());
  gpu().synchronize();
  EXPECT_EQ(out.to_vector<float>(), x);
  // a fused exchange of two parts of different dtypes: each part lands in its own receive buffer
  {
    const Tensor codes =
        Tensor::from_vector(std::vector<uint8_t>{3, 1, 4, 1, 5, 9, 2, 6}, {8}, MemCategory::Workspace, Device::cuda(0));
    const Tensor codes_in = Tensor::zeros({8}, DType::U8, MemCategory::Workspace, Device::cuda(0));
    const Tensor scales_in = on_gpu(std::vector<float>(5, -99.0f));
    const Communicator::AllToAllvPart parts[2] = {{codes, {8}, codes_in, {8}}, {send, counts, scales_in, counts}};
    comm->all_to_allv_fused(parts, gpu());
    gpu().synchronize();
    EXPECT_EQ(codes_in.to_vector<uint8_t>(), (std::vector<uint8_t>{3, 1, 4, 1, 5, 9, 2, 6}));
    EXPECT_EQ(scales_in.to_vector<float>(), x);
  }
  const Tensor b = on_gpu(x);
  comm->broadcast(b, 0, gpu());
  comm->barrier();
  EXPECT_EQ(b.to_vector<float>(), x);
  EXPECT_EQ(comm->stats().bytes_sent, 0);
  EXPECT_EQ(sum_in_rank_order(*comm, 0.25, gpu()), 0.25);
  std::unique_ptr<Communicator> sub = comm->split(0, 0, "dp");
  EXPECT_EQ(sub->size(), 1);
  EXPECT_THROW(comm->all_reduce(Tensor::zeros({2}, DType::F32), Tensor::zeros({2}, DType::F32), ReduceOp::Sum, gpu()),
               Error);  // host tensors are refused
}
