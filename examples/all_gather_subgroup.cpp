// Example 3 (torch docs): every rank calls new_group({0, 1}); only the members (ranks 0 and 1)
// gather [rank*100, rank*100+1] into zeros(4). Run with 4 ranks; ranks 2 and 3 sit it out.
// Rank 0 prints tensor([  0.,   1., 100., 101.]).
//   rdmacoll-run -n 4 ./example_all_gather_subgroup
#include <iostream>

#include <rdmacoll/rdmacoll.hpp>

int main() {
  namespace dist = rdmacoll;
  dist::init_process_group();
  const int rank = dist::get_rank();
  dist::Group group = dist::new_group({0, 1});
  if (group.is_member()) {
    dist::Tensor input = dist::tensor({rank * 100.0, rank * 100.0 + 1}, dist::DType::Int64);
    dist::Tensor output = dist::zeros({4}, dist::DType::Float32);
    dist::all_gather_into_tensor(output, input, group);
    std::cout << output << std::endl;
  } else {
    std::cout << "rank " << rank << " is not in the group" << std::endl;
  }
  dist::destroy_process_group();
}
