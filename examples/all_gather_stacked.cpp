// Example 2 (torch docs): input [rank*10+1, rank*10+2, rank*10+3] (int64) gathered into a
// stacked (world, 3) float32 output. Rank 0 of 2 prints rows [1., 2., 3.] and [11., 12., 13.].
//   rdmacoll-run -n 2 ./example_all_gather_stacked
#include <iostream>

#include <rdmacoll/rdmacoll.hpp>

int main() {
  namespace dist = rdmacoll;
  dist::init_process_group();
  const int rank = dist::get_rank();
  const int world = dist::get_world_size();
  dist::Tensor input =
      dist::tensor({rank * 10 + 1.0, rank * 10 + 2.0, rank * 10 + 3.0}, dist::DType::Int64);
  dist::Tensor output = dist::zeros({world, 3}, dist::DType::Float32);
  dist::all_gather_into_tensor(output, input);
  std::cout << output << std::endl;
  dist::destroy_process_group();
}
