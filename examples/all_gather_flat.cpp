// Example 1 (torch docs): every rank contributes [rank+1, rank+2] (int64) and gathers into a
// flat float32 output of world*2 elements. Rank 0 of 2 prints tensor([1., 2., 2., 3.]).
//   rdmacoll-run -n 2 ./example_all_gather_flat
#include <iostream>

#include <rdmacoll/rdmacoll.hpp>

int main() {
  namespace dist = rdmacoll;
  dist::init_process_group();
  const int rank = dist::get_rank();
  const int world = dist::get_world_size();
  dist::Tensor input = dist::tensor({rank + 1.0, rank + 2.0}, dist::DType::Int64);
  dist::Tensor output = dist::zeros({world * 2}, dist::DType::Float32);
  dist::all_gather_into_tensor(output, input);
  std::cout << output << std::endl;
  dist::destroy_process_group();
}
