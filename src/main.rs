fn main() {
    let a = mlx_rs::Array::from_slice(&[1.0f32, 2.0, 3.0], &[3]);
    let b = mlx_rs::ops::sum(&a, None).unwrap();
    println!("{b:?}");
}
